"""A study whose server cannot keep up with the arrivals says so (issue 36, finding 4): the fake
server serves one request at a time (FAKE_SERIAL=1) and the workload's requests arrive together, so
each waits for all before it; a closed loop on the same server is not saturated by holding its
requests in flight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO

SPACE = "name: s\nplatform: cpu\nparameters:\n  block_size: {type: categorical, choices: [32, 64], flag: --block-size}\n"


def _workload(path: Path, n: int = 30) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps({"prompt": f"q{i} " + "word " * 20, "max_tokens": 8, "timestamp": i * 0.02}) + "\n"
            )
    return path


def _autotune(tmp_path: Path, mark: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_SERIAL": "1", "FAKE_TTFT_S": "0.05"}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _study(tmp_path: Path, mark: str, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    (tmp_path / "space.yaml").write_text(SPACE)
    return _autotune(
        tmp_path, mark,
        "run", "--workload", str(_workload(tmp_path / "burst.jsonl")), "--model", str(model),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--confirm-rounds", "0", "--space", str(tmp_path / "space.yaml"),
        "--n-trials", "2", "--study", name, "--out", str(tmp_path / f"{name}.yaml"), *extra,
    )  # fmt: skip


def test_a_saturated_study_flags_every_trial_says_it_after_the_baseline_and_at_the_end(
    tmp_path: Path, mark: str
) -> None:
    res = _study(tmp_path, mark, "sat")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    trial_lines = [ln for ln in lines if ln.lstrip().startswith("trial #")]
    assert len(trial_lines) == 2 and all("saturated:" in ln for ln in trial_lines), trial_lines
    assert all("TTFT p50 grew" in ln and "fix: " in ln for ln in trial_lines)
    # up front: the sentence follows the baseline's line, before the next trial starts
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("trial #0"))
    assert lines[at + 1].startswith("the baseline saturated the server"), lines[at : at + 3]
    assert "--speed" in lines[at + 1] and "--rate" in lines[at + 1]
    # the end: not only "best: trial N"
    out = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert out[-1].startswith("every measured trial saturated the server (2 of 2)"), out
    # the record
    st = optuna.load_study(study_name="sat", storage=f"sqlite:///{tmp_path / 'studies' / 'sat.db'}")
    for t in st.get_trials():
        figures = t.user_attrs["figures"]
        assert figures["saturated"] is True and "TTFT p50 grew" in figures["saturation_note"]
        assert any(n.startswith("saturated:") for n in t.user_attrs["notes"])
    # the report
    rep = _autotune(tmp_path, mark, "report", "--study", "sat", "--studies-dir", str(tmp_path / "studies"))
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "studies" / "sat" / "report.html").read_text()
    assert "every measured trial saturated the server" in html and "ok; saturated" in html


def test_a_closed_loop_holding_its_requests_in_flight_is_not_saturated(tmp_path: Path, mark: str) -> None:
    res = _study(tmp_path, mark, "closed", "--concurrency", "4")
    assert res.returncode == 0, res.stderr
    assert "saturated" not in res.stderr + res.stdout
