"""The exporter seam: ``--export-format vllm-config`` (the default) writes byte for byte what the
exporter wrote before the seam; a format that does not exist is one line naming the option, the
value and the choices, exit 2, before anything is read or written."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.errors import ConfigError, ExportError
from autotune.export import export_best, exporter_for, write_export
from tests.conftest import REPO
from tests.unit.export._measured import measured_study

# written by export_best at 53b2b49, before the seam, from measured_study(env=ENV); its date is DATE
GOLDEN = REPO / "tests" / "data" / "export" / "vllm_config.yaml"
ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
CHOICES = "(fix: one of vllm-config, helm-values)"


def _undated(text: str) -> str:
    return re.sub(
        r"^(# vLLM configuration exported by vllm-autotune on ).*$", r"\1DATE", text, count=1, flags=re.M
    )


@pytest.mark.parametrize("fmt", [None, "vllm-config"])
def test_the_vllm_config_export_is_unchanged(tmp_path: Path, fmt: str | None) -> None:
    out = tmp_path / "best.yaml"
    kwargs = {} if fmt is None else {"export_format": fmt}
    _, exported = export_best(measured_study(env=ENV), out=out, **kwargs)
    assert _undated(out.read_text()) == GOLDEN.read_text()
    again = tmp_path / "again.yaml"
    write_export(exported, again)  # what a group writes per model
    assert again.read_text() == out.read_text() == exporter_for("vllm-config").render({"chat": exported})


def test_a_vllm_config_file_holds_one_engine() -> None:
    _, exported = export_best(measured_study(), out=None)
    with pytest.raises(ExportError, match="holds one engine, not 2"):
        exporter_for("vllm-config").render({"a": exported, "b": exported})


def test_an_unknown_format_is_one_line_naming_the_choices(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    with pytest.raises(ConfigError) as raised:
        export_best(measured_study(), out=out, export_format="helm")
    assert str(raised.value) == f"--export-format: 'helm' is not an export format {CHOICES}"
    assert raised.value.exit_code == 2 and not out.exists()


@pytest.fixture
def cli() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():  # main() installs process-wide signal handlers
        signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["export", "--study", "chat"], f"--export-format: 'yaml' is not an export format {CHOICES}"),
        (
            ["run", "--model", "m", "--workload", "w.jsonl"],
            f"--export-format: export_format: 'yaml': Input should be 'vllm-config' or 'helm-values' {CHOICES}",
        ),
    ],
)
def test_the_cli_says_a_bad_format_in_one_line_and_exits_2(
    cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--studies-dir", str(tmp_path), "--export-format", "yaml"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.strip() == f"error: {said}"
    assert list(tmp_path.iterdir()) == []  # nothing opened, nothing written


def test_autotune_export_writes_helm_values(
    cli: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured_study(storage=f"sqlite:///{tmp_path / 'chat.db'}")
    out = tmp_path / "values.yaml"
    main(
        [
            "export",
            "--study",
            "chat",
            "--studies-dir",
            str(tmp_path),
            "--out",
            str(out),
            "--export-format",
            "helm-values",
        ]
    )
    said = capsys.readouterr().out
    (entry,) = yaml.safe_load(out.read_text())["servingEngineSpec"]["modelSpec"]
    assert entry["modelURL"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (
        f"deploy: helm repo add vllm https://vllm-project.github.io/production-stack && helm install vllm vllm/vllm-stack -f {out}"
        in " ".join(said.split())
    )
