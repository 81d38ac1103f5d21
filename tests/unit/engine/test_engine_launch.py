from __future__ import annotations

import json

import pytest

from autotune.engine import LaunchSpec
from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER, build_argv, parse_engine_args
from autotune.errors import ConfigError
from autotune.space import RenderedConfig


def test_engine_args_in_every_form_become_flag_value_pairs() -> None:
    pairs = parse_engine_args(
        [
            "--max-model-len=2048",
            "--max-num-seqs 64",
            "--enforce-eager",
            "--served-model-name 'my model'",
            "--dtype",
            "bfloat16",
            "--seed=-1",
        ]
    )
    assert pairs == (
        ("--max-model-len", "2048"),
        ("--max-num-seqs", "64"),
        ("--enforce-eager", None),
        ("--served-model-name", "my model"),
        ("--dtype", "bfloat16"),
        ("--seed", "-1"),
    )


def test_a_value_after_a_bare_flag_is_not_taken_when_the_next_token_is_a_flag() -> None:
    assert parse_engine_args(["--enforce-eager --max-model-len 512"]) == (
        ("--enforce-eager", None),
        ("--max-model-len", "512"),
    )


@pytest.mark.parametrize("raw", [["--api-key=s3cret"], ["--api-key", "s3cret"], ["--api-key s3cret"]])
def test_api_key_is_refused_without_echoing_the_secret(raw: list[str]) -> None:
    with pytest.raises(ConfigError, match="VLLM_API_KEY") as info:
        parse_engine_args(raw)
    assert "s3cret" not in str(info.value)


def test_api_key_in_underscore_spelling_is_refused_too() -> None:
    with pytest.raises(ConfigError):
        parse_engine_args(["--api_key=s3cret"])


@pytest.mark.parametrize("flag", ["--host", "--port", "--model"])
def test_flags_autotune_sets_itself_are_refused(flag: str) -> None:
    with pytest.raises(ConfigError, match=f"{flag} is set by autotune"):
        parse_engine_args([f"{flag}=x"])


@pytest.mark.parametrize("raw", [["model-dir"], ["-tp", "2"], ["--max-num-seqs", "8", "16"]])
def test_tokens_that_are_not_flags_are_refused(raw: list[str]) -> None:
    with pytest.raises(ConfigError, match="is not a flag"):
        parse_engine_args(raw)


@pytest.mark.parametrize(
    "raw",
    [
        ['--kv-transfer-config={"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'],
        ["--kv-transfer-config", '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}'],
    ],
    ids=["inline", "separate"],
)
def test_json_value_reaches_vllm_unchanged(raw: list[str]) -> None:
    ((name, value),) = parse_engine_args(raw)
    assert name == "--kv-transfer-config"
    assert value is not None and value.replace(" ", "") == (
        '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'
    )


def test_value_after_equals_is_kept_verbatim_even_with_a_quote() -> None:
    assert parse_engine_args(["--served-model-name=Bob's model"]) == (("--served-model-name", "Bob's model"),)


def test_unbalanced_quote_in_several_flags_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="balance the quotes"):
        parse_engine_args(["--enforce-eager --served-model-name 'Bob"])


def test_vllm_serve_takes_the_model_positionally() -> None:
    spec = LaunchSpec(model="/models/tiny", launcher=GPU_LAUNCHER)
    argv = build_argv(spec, RenderedConfig(args=()), 8123)
    assert argv[:3] == ["vllm", "serve", "/models/tiny"]
    assert "--model" not in argv
    assert argv[3:] == ["--host", "127.0.0.1", "--port", "8123"]


def test_module_launcher_takes_the_model_as_a_flag() -> None:
    spec = LaunchSpec(model="/models/tiny", launcher=CPU_LAUNCHER)
    argv = build_argv(spec, RenderedConfig(args=()), 8123)
    assert argv[: len(CPU_LAUNCHER)] == list(CPU_LAUNCHER)
    rest = argv[len(CPU_LAUNCHER) :]
    assert rest[:2] == ["--model", "/models/tiny"]
    assert rest.count("/models/tiny") == 1


def test_a_configuration_given_whole_overrides_fixed_flags_of_the_same_name_including_no_forms() -> None:
    spec = LaunchSpec(
        model="m",
        fixed_args=(
            ("--block-size", "16"),
            ("--enable-prefix-caching", None),
            ("--no-enable-chunked-prefill", None),
            ("--max-model-len", "2048"),
        ),
    )
    rendered = RenderedConfig(
        args=("--block-size", "32", "--no-enable-prefix-caching", "--enable-chunked-prefill")
    )
    argv = build_argv(spec, rendered, 9000)
    assert argv.count("--block-size") == 1
    assert argv[argv.index("--block-size") + 1] == "32"
    assert "--enable-prefix-caching" not in argv
    assert "--no-enable-prefix-caching" in argv
    assert "--no-enable-chunked-prefill" not in argv
    assert "--enable-chunked-prefill" in argv
    assert argv[argv.index("--max-model-len") + 1] == "2048"


def test_a_fixed_json_flag_takes_the_rendered_fields_it_does_not_set() -> None:
    fixed = '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"block_size": 256}}'
    spec = LaunchSpec(model="m", fixed_args=(("--kv-transfer-config", fixed),))
    tuned = '{"kv_connector": "X", "kv_connector_extra_config": {"block_size": 64, "eviction_policy": "arc"}}'
    argv = build_argv(spec, RenderedConfig(args=("--kv-transfer-config", tuned)), 9000)
    assert argv.count("--kv-transfer-config") == 1
    merged = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    assert merged == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"block_size": 256, "eviction_policy": "arc"},
    }


def test_fixed_flags_survive_when_nothing_tunes_them() -> None:
    spec = LaunchSpec(model="m", fixed_args=(("--enforce-eager", None), ("--max-num-seqs", "8")))
    argv = build_argv(spec, RenderedConfig(args=()), 9000)
    assert argv[-3:] == ["--enforce-eager", "--max-num-seqs", "8"]


def test_api_key_reaches_vllm_only_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "inherited-key")
    spec = LaunchSpec(model="m", api_key="configured-key")
    rendered = RenderedConfig(args=("--block-size", "32"), env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    env = spec.process_env(rendered)
    assert env["VLLM_API_KEY"] == "configured-key"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    argv = build_argv(spec, rendered, 9000)
    assert not any("configured-key" in a for a in argv)
    assert "configured-key" not in repr(spec)


def test_an_inherited_api_key_is_dropped_when_none_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "inherited-key")
    env = LaunchSpec(model="m").process_env(RenderedConfig(args=()))
    assert "VLLM_API_KEY" not in env


def test_process_env_keeps_vllm_offline_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    env = LaunchSpec(model="m", env={"OMP_NUM_THREADS": "2"}).process_env(RenderedConfig(args=()))
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["OMP_NUM_THREADS"] == "2"
