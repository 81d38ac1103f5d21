"""Every export is a measured configuration that beat a measured baseline (issue 11), and the
commands around a study (export, compare) measure and read exactly as ``run`` does (issue 10)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import time
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.engine import FLOAT32_KV_SCALE, serves_float32
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, wait_no_processes
from tests.e2e.test_cli import (
    _autotune,
    _fake_model,
    _fake_run,
    _good_workload,
    _run,
    _signal_when_engine_runs,
)


def _env(mark: str, **extra: str) -> dict[str, str]:
    return {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), **extra}


def _completed_baselines(db: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    return [
        t
        for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        if t.user_attrs.get("baseline") and t.user_attrs.get("status") == "ok"
    ]


def test_a_missing_model_directory_is_one_line_exit_2_and_nothing_starts(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    args = _fake_run(tmp_path, wl)
    args[args.index("--model") + 1] = "/no/such/dir"
    res = _run(args, mark, tmp_path)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "/no/such/dir does not exist" in lines[0], lines
    assert "Traceback" not in res.stderr
    assert not processes_marked(mark)
    assert not (tmp_path / "studies").exists()


def test_a_hub_name_that_is_not_cached_offline_is_one_line(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    args = _fake_run(tmp_path, wl)
    args[args.index("--model") + 1] = "some-org/no-such-model"
    res = _run(args, mark, tmp_path, env=_env(mark, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1"))
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not in the Hugging Face cache" in lines[0], lines
    assert not processes_marked(mark)


def test_ctrl_c_during_the_baseline_then_resume_measures_the_baseline(tmp_path: Path, mark: str) -> None:
    wl = tmp_path / "slow.jsonl"
    with wl.open("w") as f:
        for i in range(30):
            f.write(json.dumps({"prompt": f"q{i}", "max_tokens": 100, "timestamp": i * 0.3}) + "\n")
    args = _fake_run(tmp_path, wl, "--n-trials", "2", "--study", "s")
    proc = _autotune(args, mark, tmp_path)
    _signal_when_engine_runs(proc, mark, "fake_vllm.py", settle_s=2.0)
    t_signal = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - t_signal < 10
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if "interrupted" in ln] == [
        "interrupted: every vLLM process was stopped"
    ]
    assert not wait_no_processes(mark, timeout=15)
    db = tmp_path / "studies" / "s.db"
    assert _completed_baselines(db, "s") == []  # the interrupted baseline was not measured

    fast = _good_workload(tmp_path / "fast.jsonl")
    res = _run([*_fake_run(tmp_path, fast, "--n-trials", "1", "--study", "s")], mark, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "baseline not measured yet: it runs first" in res.stderr
    assert "baseline: vLLM defaults" in res.stderr
    (base,) = _completed_baselines(db, "s")
    assert base.params == {} and base.user_attrs["rendered_args"] == []


def test_export_of_a_study_is_the_measured_command_and_leaves_the_study_untouched(
    tmp_path: Path, mark: str
) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    space = tmp_path / "space.yaml"
    space.write_text(
        "name: s\nplatform: cpu\nparameters:\n  block_size: {type: categorical, choices: [64], flag: --block-size}\n"
    )
    fixed = ["--engine-arg=--max-model-len=1024", "--engine-arg=--enforce-eager"]
    res = _run(_fake_run(tmp_path, wl, "--space", str(space), "--n-trials", "2", *fixed), mark, tmp_path)
    assert res.returncode == 0, res.stderr
    db = tmp_path / "studies" / "rag-s.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()

    out = tmp_path / "again.yaml"
    res = _run(
        ["export", "--study", "rag-s", "--studies-dir", str(tmp_path / "studies"), "--out", str(out)],
        mark,
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before  # export reads, never writes
    exported = yaml.safe_load(out.read_text())
    study = optuna.load_study(study_name="rag-s", storage=f"sqlite:///{db}")
    best = next(t for t in study.get_trials() if t.number == int(res.stdout.split()[1].rstrip(";")))
    measured = best.user_attrs["command"]
    assert exported["max-model-len"] == 1024 and exported["enforce-eager"] is True  # fixed flags kept
    assert exported["model"] == measured[measured.index("--model") + 1]
    for flag, value in itertools.pairwise(measured):
        if flag == "--block-size":
            assert exported["block-size"] == int(value)


def test_compare_exits_non_zero_when_an_arm_produced_no_figures(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    config = tmp_path / "b.yaml"
    config.write_text(f"model: {_fake_model(tmp_path)}\nblock-size: 32\n")
    res = _run(
        [
            "compare", "--workload", str(wl), "--config", str(config), "--rounds", "1",
            "--launcher", " ".join(FAKE_LAUNCHER), "--no-check-args", "--no-check-memory",
            "--log-dir", str(tmp_path / "cmp"),
        ],
        mark,
        tmp_path,
        env=_env(mark, FAKE_OOM_BLOCK_SIZE="32"),
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert "A defaults: ok" in res.stderr and "out_of_memory" in res.stderr
    assert "no figures from B" in res.stderr


def test_compare_cleans_shared_memory_exactly_as_a_trial_does(tmp_path: Path, mark: str) -> None:
    """Each engine the fake starts leaves a psm_* file in /dev/shm (as torch's segments of a killed
    vLLM do); compare's engines are stopped by the same evaluator as a study's, which removes them."""
    wl = _good_workload(tmp_path / "rag.jsonl")
    config = tmp_path / "b.yaml"
    config.write_text(f"model: {_fake_model(tmp_path)}\nblock-size: 64\n")
    prefix = f"psm_autotune_test_{mark[:8]}_"
    res = _run(
        [
            "compare", "--workload", str(wl), "--config", str(config), "--rounds", "1",
            "--launcher", " ".join(FAKE_LAUNCHER), "--no-check-args", "--no-check-memory",
            "--log-dir", str(tmp_path / "cmp"),
        ],
        mark,
        tmp_path,
        env=_env(mark, FAKE_SHM_PREFIX=prefix),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    logs = " ".join(p.read_text() for p in (tmp_path / "cmp").glob("trial-*.log"))
    assert "fake vLLM starting" in logs
    assert sorted(Path("/dev/shm").glob(prefix + "*")) == []


@pytest.mark.parametrize("with_key", [True, False])
def test_compare_passes_the_api_key_exactly_as_a_trial_does(
    tmp_path: Path, mark: str, with_key: bool
) -> None:
    """The fake requires the key on /v1/*: compare measures with it (built by the same builder as
    run); without --api-key-env every request is refused and compare says so."""
    wl = _good_workload(tmp_path / "rag.jsonl")
    config = tmp_path / "b.yaml"
    config.write_text(f"model: {_fake_model(tmp_path)}\nblock-size: 64\n")
    key_args = ["--api-key-env", "MY_KEY"] if with_key else []
    res = _run(
        [
            "compare", "--workload", str(wl), "--config", str(config), "--rounds", "1",
            "--launcher", " ".join(FAKE_LAUNCHER), "--no-check-args", "--no-check-memory",
            "--log-dir", str(tmp_path / "cmp"), *key_args,
        ],
        mark,
        tmp_path,
        env=_env(mark, FAKE_REQUIRE_KEY="1", FAKE_EXPECTED_KEY="sk-test-key-1", MY_KEY="sk-test-key-1"),
    )  # fmt: skip
    if with_key:
        assert res.returncode == 0, res.stderr
        assert res.stderr.count(": ok ttft") == 2
    else:
        assert res.returncode == 1, res.stderr
        assert "no_success" in res.stderr and "401" in res.stderr
    assert "sk-test-key-1" not in res.stdout + res.stderr


@pytest.mark.vllm(alongside=True)
def test_defaults_that_cannot_run_here_get_a_named_reference_as_the_baseline(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    """On the CPU build --gpu-memory-utilization is a share of host memory: 0.99 cannot fit next to
    anything else, so the tool names a runnable reference (the largest KV size of the space that
    fits), measures it as the baseline and says so in the export."""
    out = tmp_path / "best.yaml"
    args = [
        "run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model),
        "--studies-dir", str(tmp_path / "studies"), "--no-check-args", "--n-trials", "1",
        "--confirm-rounds", "0", "--speed", "3", "--out", str(out), "--passes", "1",
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
        "--engine-arg=--gpu-memory-utilization=0.99",
    ]  # fmt: skip
    dry = _run([*args, "--dry-run"], mark, tmp_path)
    assert dry.returncode == 5, dry.stderr  # said before any trial, non-zero without --accept-reference
    assert "vLLM's defaults cannot run here" in dry.stderr
    assert "reference kv_cache_memory_bytes=128M" in dry.stderr
    p = _autotune(args, mark, tmp_path)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "baseline: reference kv_cache_memory_bytes=128M" in err
    header = out.read_text()
    assert "reference kv_cache_memory_bytes=128M: vLLM's defaults do not fit here" in header
    # the reference was best (the only trial); where the CPU build serves float32 its size runs doubled
    assert f"kv-cache-memory-bytes: {128 * (FLOAT32_KV_SCALE if serves_float32() else 1)}M" in header
