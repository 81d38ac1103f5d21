"""``autotune run --predict`` through the CLI on the fake server (issue 48): every started trial's
line shows its prediction beside its measurement, the run ends with the ledger and the audit line,
the export header carries the best's prediction, and the calibration file is saved for ``autotune
predict`` (which reads one: tests/benchmarks/test_predict_grid.py). Bad input (an objective the model does not predict) is one line and exit 2 before any
engine starts. Nothing here is a measurement of vLLM (the model on the real CPU build:
benchmarks/predict_grid.py and benchmarks/predict_study.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked
from tests.e2e.test_cli import _fake_model

SPACE = REPO / "benchmarks" / "data" / "predict_grid_space.yaml"


def _workload(path: Path) -> Path:
    with path.open("w") as f:
        for i in range(16):
            prompt = f"document {i % 2} " + "shared words " * 60 + f"question {i}"
            f.write(json.dumps({"prompt": prompt, "max_tokens": 4, "timestamp": i * 0.1}) + "\n")
    return path


def _run(tmp_path: Path, mark: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)}
    args = [
        "run", "--workload", str(_workload(tmp_path / "w.jsonl")), "--model", str(_fake_model(tmp_path)),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"), "--no-check-args",
        "--space", str(SPACE), "--baseline-arg=--kv-cache-memory-bytes=20M", "--confirm-rounds", "0",
        "--study", "p", "--predict", "--passes", "1", *extra,
    ]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_study_with_the_model_shows_predicted_next_to_measured(tmp_path: Path) -> None:
    r = _run(tmp_path, "predict-run", "--objective", "ttft_p90", "--n-trials", "3", "--no-prune")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = r.stdout + r.stderr  # the console (stderr) and the results (stdout)
    out = " ".join(text.split())  # the console wraps long lines
    assert "its candidates are left to the latency model's picks (--predict)" in out
    predicted = [line for line in text.splitlines() if "| predicted " in line]
    assert len(predicted) >= 2, text  # every trial after the baseline, measured
    assert all(", measured " in line for line in predicted)
    assert "ledger: " in out and "predictions of p90 TTFT, mean absolute error" in out
    assert "audit: " in out
    cal = tmp_path / "studies" / "p" / "calibration.json"
    assert json.loads(cal.read_text())["costs"]["requests"] > 0
    best = (tmp_path / "studies" / "p" / "best.yaml").read_text()
    assert (
        "# predicted before its start (latency model): ttft_p90" in best
    ) or "the baseline was best" in best
    assert processes_marked("predict-run") == []


def test_an_objective_the_model_does_not_predict_is_refused_before_any_start(tmp_path: Path) -> None:
    r = _run(tmp_path, "predict-bad", "--objective", "output_throughput", "--n-trials", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "--predict" in err[0] and "--objective output_throughput" in err[0], r.stderr
    assert not (tmp_path / "studies" / "p").exists() or not list((tmp_path / "studies" / "p").glob("*.log"))
    assert processes_marked("predict-bad") == []
