from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from autotune.engine import SERVE_LAUNCHER
from autotune.errors import ExportError
from autotune.export import (
    ExportedConfig,
    args_to_config,
    build_export,
    runnable_launcher,
    write_export,
)


def test_flag_values_keep_their_types_in_yaml() -> None:
    config = args_to_config(
        [
            "--block-size",
            "32",
            "--gpu-memory-utilization=0.9",
            "--kv-cache-memory-bytes",
            "64M",
            "--kv-transfer-config",
            '{"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {"cpu_bytes_to_use": 8}}',
            "--enforce-eager",
            "--no-enable-prefix-caching",
        ]
    )
    assert config == {
        "block-size": 32,
        "gpu-memory-utilization": 0.9,
        "kv-cache-memory-bytes": "64M",
        "kv-transfer-config": {
            "kv_connector": "OffloadingConnector",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 8},
        },
        "enforce-eager": True,
        # not "enable-prefix-caching: false", which older `vllm serve --config` silently drop
        "no-enable-prefix-caching": True,
    }
    assert type(config["block-size"]) is int


def test_host_and_port_are_not_exported() -> None:
    assert args_to_config(["--host", "127.0.0.1", "--port=8123", "--max-num-seqs", "8"]) == {
        "max-num-seqs": 8
    }


def test_a_token_that_is_not_a_flag_cannot_be_exported() -> None:
    with pytest.raises(ExportError, match="'stray'"):
        args_to_config(["--block-size", "32", "stray"])


def _export(fixed: list[str], tuned: list[str], env: dict[str, str] | None = None) -> ExportedConfig:
    return build_export(
        model="/models/tiny",
        fixed_argv=fixed,
        tuned_argv=tuned,
        env=env or {},
        header_lines=["study 's', trial 3", "", "ttft_p90: 123"],
    )


def test_tuned_flags_override_fixed_ones_including_no_forms() -> None:
    exported = _export(
        fixed=["--enable-prefix-caching", "--block-size", "16", "--max-model-len", "2048"],
        tuned=["--no-enable-prefix-caching", "--block-size", "32"],
    )
    assert exported.config == {
        "model": "/models/tiny",
        "max-model-len": 2048,
        "no-enable-prefix-caching": True,
        "block-size": 32,
    }


def test_a_tuned_on_flag_replaces_a_fixed_no_flag() -> None:
    exported = _export(fixed=["--no-enable-chunked-prefill"], tuned=["--enable-chunked-prefill"])
    assert exported.config == {"model": "/models/tiny", "enable-chunked-prefill": True}


def test_command_line_is_equivalent_and_shell_safe() -> None:
    exported = _export(
        fixed=["--served-model-name", "my model"],
        tuned=["--kv-transfer-config", '{"kv_connector": "OffloadingConnector"}'],
        env={"VLLM_CPU_KVCACHE_SPACE": "4"},
    )
    tokens = shlex.split(exported.command)
    launcher = list(runnable_launcher(SERVE_LAUNCHER))  # `vllm serve`, or the module where it cannot run
    model = ["/models/tiny"] if launcher[-1] == "serve" else ["--model", "/models/tiny"]
    assert tokens[: 1 + len(launcher) + len(model)] == ["VLLM_CPU_KVCACHE_SPACE=4", *launcher, *model]
    assert tokens[tokens.index("--served-model-name") + 1] == "my model"
    assert tokens[tokens.index("--kv-transfer-config") + 1] == '{"kv_connector": "OffloadingConnector"}'


def test_written_file_is_yaml_that_reads_back_to_the_config(tmp_path: Path) -> None:
    exported = _export(
        fixed=["--max-model-len", "2048"],
        tuned=["--no-enable-prefix-caching", "--kv-transfer-config", '{"kv_role": "kv_both"}'],
        env={"VLLM_CPU_KVCACHE_SPACE": "4"},
    )
    target = tmp_path / "out" / "best.yaml"
    write_export(exported, target)
    text = target.read_text()
    assert text.startswith("# study 's', trial 3\n#\n# ttft_p90: 123\n")
    assert "VLLM_CPU_KVCACHE_SPACE=4" in text
    assert yaml.safe_load(text) == dict(exported.config)
    assert [p.name for p in target.parent.iterdir()] == ["best.yaml"]


def test_rewriting_replaces_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "best.yaml"
    target.write_text("old: true\n")
    write_export(_export(fixed=[], tuned=["--block-size", "64"]), target)
    assert yaml.safe_load(target.read_text()) == {"model": "/models/tiny", "block-size": 64}


def test_export_into_a_path_under_a_file_is_an_export_error_and_writes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("keep me\n")
    with pytest.raises(ExportError, match="cannot write"):
        write_export(_export(fixed=[], tuned=["--block-size", "32"]), blocker / "best.yaml")
    assert blocker.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-dir"]


def test_a_failed_replace_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "best.yaml"
    target.mkdir()
    with pytest.raises(ExportError):
        write_export(_export(fixed=[], tuned=["--block-size", "32"]), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.yaml"]
