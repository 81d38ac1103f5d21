"""The promoted config out (issue 29, item 4): a real night's --on-promote commits it into a Git
repository; a failing hook (on the fake server) keeps the export and the night exits with the hook's
own code; `nightly rollback` with nothing to roll back to says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, RealNights, wait_no_processes

SPACE = """name: nightly-promote
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64, 128], flag: --block-size}
"""


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    wl = tmp_path / "wl.jsonl"
    rows = [
        {"prompt": f"question {i} " + "word " * 40, "max_tokens": 4, "timestamp": i * 0.03} for i in range(16)
    ]
    wl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    (tmp_path / "space.yaml").write_text(SPACE)
    return wl, model, tmp_path / "space.yaml"


def _night(tmp_path: Path, study: str, hook: str, mark: str) -> subprocess.CompletedProcess[str]:
    wl, model, space = _files(tmp_path)
    args = [
        "nightly", "--study", study, "--workload", str(wl), "--model", str(model), "--space", str(space),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--objective", "ttft_p50", "--budget", "6m",
        "--rounds", "2", "--min-improvement", "0.15", "--max-trials", "6", "--passes", "1",
        "--out", str(tmp_path / study / "best.yaml"), "--on-promote", hook,
    ]  # fmt: skip
    # the fake's modelled TTFT x5: block 64 is ~40% faster than the default 128, far above its jitter
    env = {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_TTFT_SCALE": "5"}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.vllm
def test_a_real_night_commits_its_promotion_into_git(real_nights: RealNights) -> None:
    """Night 1 of ``real_nights`` (tests/conftest.py, real vLLM) promotes, and its --on-promote hook
    commits the export into a local Git repository; ``nightly rollback`` withdraws it from the export
    and runs no hook."""
    night = real_nights.night
    assert night.returncode == 0, night.stderr[-3000:]
    assert "Promoted trial #" in night.stdout and "--on-promote: on-promote hook succeeded" in night.stderr
    assert not re.search(r"=\d+\.\d{5,}", night.stderr), night.stderr  # night lines print 4 figures
    committed = yaml.safe_load((real_nights.gitops / "vllm.yaml").read_text())
    # what night 1 promoted: the rollback withdrew it from best.yaml into history/withdrawn
    (withdrawn,) = (real_nights.out.parent / "history" / "withdrawn").glob("best.*.yaml")
    assert committed == yaml.safe_load(withdrawn.read_text())
    assert committed["max-num-batched-tokens"] == 2048 and committed["model"]
    log = subprocess.run(
        ["git", "-C", str(real_nights.gitops), "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(log) == 1 and re.fullmatch(r"night 1: ttft_p50 \d+(\.\d+)?", log[0]), log
    assert "--on-promote" not in real_nights.rollback.stderr


def test_a_failing_hook_keeps_the_export_and_the_night_exits_with_the_hooks_code(
    tmp_path: Path, mark: str
) -> None:
    night = _night(tmp_path, "other", "echo cannot reach the cluster >&2; exit 9", mark)
    assert night.returncode == 9, (night.stdout, night.stderr)  # the hook's own code (was 7)
    assert "exited with code 9" in night.stderr
    assert "the export" in night.stderr and "is kept" in night.stderr
    assert yaml.safe_load((tmp_path / "other" / "best.yaml").read_text())["block-size"] == 64
    assert not wait_no_processes(mark, timeout=15)


def test_rollback_with_nothing_to_roll_back_to_says_so(tmp_path: Path, mark: str) -> None:
    export = tmp_path / "best.yaml"
    export.write_text("model: m\nblock-size: 64\n")
    res = subprocess.run(
        [sys.executable, "-m", "autotune", "nightly", "rollback", "--study", "s", "--out", str(export)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert export.read_text() == "model: m\nblock-size: 64\n"
