"""Two runs of one study on one storage, and workers without an index (issue 30, items 3 and 4), driven
through the CLI against the fake server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, wait_no_processes


def _workload(path: Path) -> Path:
    rows = [{"prompt": f"q{i} " + "w " * 40, "max_tokens": 4, "timestamp": i * 0.05} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    return model


def _start(args: list[str], mark: str, cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _common(tmp_path: Path, studies: str) -> list[str]:
    return [
        "--workload", str(_workload(tmp_path / "wl.jsonl")), "--model", str(_model(tmp_path)),
        "--launcher", " ".join(FAKE_LAUNCHER), "--no-check-args", "--no-check-memory",
        "--storage", f"sqlite:///{tmp_path / 'one.db'}", "--studies-dir", str(tmp_path / studies),
    ]  # fmt: skip


def test_two_runs_of_one_study_on_one_sqlite_file_from_two_studies_dirs(tmp_path: Path, mark: str) -> None:
    first = _start(
        ["run", "--study", "S", "--n-trials", "2", "--confirm-rounds", "0", *_common(tmp_path, "dir-a")],
        mark,
        tmp_path,
        FAKE_START_DELAY="20",
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "one.db.S.lock").exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.2)
        second = _start(
            ["run", "--study", "S", "--n-trials", "2", *_common(tmp_path, "dir-b")], mark, tmp_path
        )
        _, err = second.communicate(timeout=120)
        assert second.returncode == 6, err
        assert "study 'S' is already running on sqlite:///" in err and f"pid {first.pid}" in err
    finally:
        first.kill()
        first.communicate()
    assert not wait_no_processes(mark, timeout=15)


def test_two_workers_without_an_index_are_worker_0_and_worker_1(tmp_path: Path, mark: str) -> None:
    common = _common(tmp_path, "studies")
    a = _start(
        ["worker", "--study", "W", "--create", "--n-trials", "2", "--passes", "1", *common], mark, tmp_path
    )
    time.sleep(1.0)
    b = _start(
        ["worker", "--study", "W", "--create", "--n-trials", "2", "--passes", "1", *common], mark, tmp_path
    )
    outs = [p.communicate(timeout=240) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs
    said = " ".join(err for _, err in outs)
    assert "worker 0:" in said and "worker 1:" in said, said
    study = optuna.load_study(study_name="W", storage=f"sqlite:///{tmp_path / 'one.db'}")
    baselines = [t for t in study.trials if t.user_attrs.get("baseline") and t.state.is_finished()]
    assert len(baselines) == 1, [(t.number, t.state) for t in study.trials]
    assert not wait_no_processes(mark, timeout=15)
