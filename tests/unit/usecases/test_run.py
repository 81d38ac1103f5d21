"""The ``run`` use case called as a function, without the CLI: a study on the fake server returns
its outcome (exit code, study, export) and says its lines to the reporter; nothing reaches a console."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from autotune import usecases
from autotune.studyfile import StudySpec, resolve_spec
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked


def _spec(tmp_path: Path, **extra: object) -> StudySpec:
    """``run`` against the fake server, as the e2e tests' ``_fake_run``: no parser, no memory check."""
    wl = tmp_path / "rag.jsonl"
    wl.write_text(
        "".join(
            json.dumps({"prompt": f"question {i} " + "word " * 50, "max_tokens": 4, "timestamp": i * 0.05})
            + "\n"
            for i in range(6)
        )
    )
    model = tmp_path / "fake-model"
    model.mkdir()
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    flags = {
        "workload": wl,
        "model": str(model),
        "launcher": " ".join(FAKE_LAUNCHER),
        "studies_dir": tmp_path / "studies",
        "check_args": False,
        "check_memory": False,
        "confirm_rounds": 0,
        **extra,
    }
    return resolve_spec("run", flags=flags)


def _text(lines: list[object]) -> list[str]:
    return [line for line in lines if isinstance(line, str)]


def test_a_study_on_the_fake_server_returns_its_export_without_a_console(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)  # the fake servers carry it: none may be left running
    said = usecases.Transcript()
    outcome = usecases.run(_spec(tmp_path, n_trials=2, study="s"), said)
    assert outcome.exit_code == 0, said.said
    assert outcome.study == "s"
    assert outcome.export == tmp_path / "studies" / "s" / "best.yaml"
    exported = yaml.safe_load(outcome.export.read_text())
    assert exported["model"] == str(tmp_path / "fake-model")
    shown = _text(said.shown)
    assert shown[0].startswith("best: trial "), shown
    assert f"wrote {outcome.export}" in shown
    assert any(line.startswith("[bold]trial 1/2[/bold]") and "baseline" in line for line in _text(said.said))
    assert said.logs == [tmp_path / "studies" / "s" / "study.log"]
    assert not processes_marked(mark)
    captured = capfd.readouterr()
    assert "best: trial" not in captured.out + captured.err  # the reporter has it, not a console


def test_a_dry_run_shows_the_commands_and_launches_nothing(tmp_path: Path) -> None:
    said = usecases.Transcript()
    outcome = usecases.run(_spec(tmp_path, dry_run=True), said)
    assert outcome == usecases.RunOutcome(0)
    shown = _text(said.shown)
    assert shown[0].startswith("# study fingerprint "), shown
    assert shown[-1].endswith("no study was written (the port is chosen at launch)")
    assert any(os.path.basename(FAKE_LAUNCHER[1]) in line for line in shown)
    assert not (tmp_path / "studies").exists()
