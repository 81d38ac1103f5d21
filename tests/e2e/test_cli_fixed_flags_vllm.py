"""A short study on the real CPU build with batching, block size and sequences fixed: every engine it
launched, the baseline included, ran with the fixed values, and vLLM itself read them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.conftest import MARK_ENV, REPO, real_rag_workload, wait_no_processes

pytestmark = pytest.mark.vllm(alongside=True)  # what each command carried, not how fast it ran

FIXED = {"--max-num-batched-tokens": "1024", "--block-size": "64", "--max-num-seqs": "8"}


def test_every_engine_of_a_real_study_runs_with_the_fixed_flags(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    args = [
        "run", "--workload", str(real_rag_workload(tmp_path / "rag.jsonl")), "--model", str(tiny_model),
        "--study", "fixed", "--studies-dir", str(tmp_path / "studies"), "--n-trials", "2",
        "--confirm-rounds", "0", "--passes", "1", "--no-prune", "--out", str(tmp_path / "best.yaml"),
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=1024",
        "--baseline-arg=--kv-cache-memory-bytes=32M",  # vLLM's default (0.92 of host RAM) may not fit beside others
        *(f"--engine-arg={flag}={value}" for flag, value in FIXED.items()),
    ]  # fmt: skip
    env = {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not wait_no_processes(mark)
    for flag, value in FIXED.items():
        assert f"fixed by you ({flag} {value})" in res.stdout + res.stderr, res.stderr
    study = optuna.load_study(study_name="fixed", storage=f"sqlite:///{tmp_path / 'studies' / 'fixed.db'}")
    launched = [t for t in study.get_trials() if t.user_attrs.get("status") == "ok"]
    assert len(launched) >= 2, [
        (t.number, t.user_attrs.get("status"), t.user_attrs.get("reason")) for t in study.get_trials()
    ]
    for t in study.get_trials():
        assert not {"max_num_batched_tokens", "block_size", "max_num_seqs"} & set(t.params), t.params
        command = t.user_attrs["command"]
        for flag, value in FIXED.items():
            at = [i for i, tok in enumerate(command) if tok == flag]
            assert len(at) == 1 and command[at[0] + 1] == value, (flag, command)
    for t in launched:  # what vLLM read: its own log of the arguments it was given
        log = (tmp_path / "studies" / "fixed" / f"trial-{t.number:04d}.log").read_text()
        said = next(ln for ln in log.splitlines() if "non-default args" in ln)
        assert "'max_num_batched_tokens': 1024" in said and "'block_size': 64" in said, said
        assert "'max_num_seqs': 8" in said, said
