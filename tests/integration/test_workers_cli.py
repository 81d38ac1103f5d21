"""``autotune worker`` as a user on another host runs it: the study says what to measure; a worker
with another workload is refused; a missing study is refused unless one worker creates it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna

from autotune.study import open_storage
from autotune.tuning import FINGERPRINT_ATTR, RUN_ATTR
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO


def _autotune(args: list[str], mark: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        MARK_ENV: mark,
        "PYTHONPATH": str(REPO),
        "AUTOTUNE_GPU_LEASE_DIR": str(cwd / "leases"),
    }
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _files(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "fake-model"
    model.mkdir()
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    wl = tmp_path / "wl.jsonl"
    wl.write_text(
        "".join(
            json.dumps({"prompt": f"q{i} " + "word " * 40, "max_tokens": 4, "timestamp": i * 0.05}) + "\n"
            for i in range(4)
        )
    )
    return wl, model


def test_workers_join_a_study_by_its_name(tmp_path: Path, mark: str) -> None:
    wl, model = _files(tmp_path)
    studies = ["--studies-dir", str(tmp_path / "studies")]
    missing = _autotune(["worker", "--study", "s", *studies], mark, tmp_path)
    assert missing.returncode == 1 and "no study 's'" in missing.stderr and "--create" in missing.stderr
    first = _autotune(
        [
            "worker", "--study", "s", "--create", "--workload", str(wl), "--model", str(model), *studies,
            "--launcher", " ".join(FAKE_LAUNCHER), "--no-check-args", "--engine-arg=--kv-cache-memory-bytes=64M",
            "--engine-arg=--max-model-len=1024", "--n-trials", "2", "--seed", "5", "--no-prune", "--passes", "1",
        ],
        mark,
        tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "worker 0: 2 trial(s) measured into study s" in first.stderr
    # another host: nothing but the study's name (and where it is); it is worker 1
    second = _autotune(
        ["worker", "--study", "s", *studies, "--index", "1", "--n-trials", "1"], mark, tmp_path
    )
    assert second.returncode == 0, second.stderr
    study = optuna.load_study(
        study_name="s", storage=open_storage(f"sqlite:///{tmp_path / 'studies' / 's.db'}")
    )
    trials = study.get_trials()
    assert len(trials) == 3 and all(t.state.name == "COMPLETE" for t in trials)
    assert [t.user_attrs["worker"] for t in trials] == [0, 0, 1]
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
    assert not any(t.user_attrs.get(RUN_ATTR) for t in trials)  # not a pool's
    assert "--max-model-len" in " ".join(trials[2].user_attrs["command"])  # the study's fixed flags
    assert set(study.user_attrs[FINGERPRINT_ATTR]) == {"space", "workload", "model", "tuned"}
    # a worker whose workload is not the study's is refused before anything starts
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "different", "max_tokens": 4}) + "\n")
    refused = _autotune(["worker", "--study", "s", *studies, "--workload", str(other)], mark, tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "measures something else: workload: the study measures wl.jsonl" in refused.stderr
    assert len(study.get_trials()) == 3
