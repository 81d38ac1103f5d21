"""Concurrent writers on one study: processes running the real study loop (no engine: an evaluator
that answers at once) against one storage, as parallel workers do, many writes per trial. Nothing
is lost or numbered twice, no writer fails, and the baseline is measured once.

SQLite is what a study gets by default; a journal file (Optuna's JournalStorage, ``journal:///``)
is tested too when this version's storage opener accepts it.

Run as a script (``python test_workers_storage.py URL SLOT N``) it is one writer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna

from autotune.space import RenderedConfig, load_search_space
from autotune.study import (
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    load_or_create,
    open_storage,
    read_record,
    run_study,
    standard_gates,
)
from tests.fakes.evaluators import over_words

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "cpu.yaml"
WRITERS, TRIALS = 4, 15


def _evaluator(slot: int):  # type: ignore[no-untyped-def]
    @over_words
    def evaluate(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        figures = {
            "completed": 10,
            "failed": 0,
            "output_throughput": 100.0 + number,
            "percentiles_ms": {"ttft_p90": 50.0 + slot},
        }
        from autotune.study import Figures

        return TrialRecord(
            status=TrialStatus.OK,
            command=("vllm", "serve", *rendered.args),
            figures=Figures(figures),
            log_path=f"trial-{number:04d}.log",
            timings_s={"startup": 0.01},
            memory={"rss_peak": 1},
        )

    return evaluate


def _writer(url: str, slot: int, n: int) -> None:
    from autotune.tuning._worker import wait_for_baseline

    obj = Objective(min_throughput_ratio=0.5)
    study = load_or_create(url, "shared", obj, seed=slot)
    if slot > 0:
        wait_for_baseline(study, since=None, timeout_s=60, poll_s=0.05)
    run_study(
        study,
        TrialPolicy(
            space=load_search_space(SPACE),
            objective=obj,
            gates=standard_gates(reuse_duplicates=False),
            trial_attrs={"worker": slot},
        ),
        _evaluator(slot),
        n,
    )


def test_four_writers_share_one_study(tmp_path: Path) -> None:
    """SQLite under four concurrent writers (write locks taken at BEGIN; see study/_storage.py).
    Optuna's journal storage is not offered: it has no heartbeats, which stale-trial recovery needs."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    load_or_create(url, "shared", Objective(min_throughput_ratio=0.5), seed=0)  # made once, baseline enqueued
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, url, str(slot), str(TRIALS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for slot in range(WRITERS)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    study = optuna.load_study(study_name="shared", storage=open_storage(url))
    trials = study.get_trials()
    assert len(trials) == WRITERS * TRIALS
    assert sorted(t.number for t in trials) == list(range(WRITERS * TRIALS))
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:  # every attribute of every record arrived
        rec = read_record(t)
        assert rec.ok and rec.figures is not None and rec.figures.completed == 10
        assert rec.log_path == f"trial-{t.number:04d}.log" and rec.constraint_names
    assert sum(read_record(t).baseline for t in trials) == 1
    assert {t.user_attrs["worker"] for t in trials} == set(range(WRITERS))
    print(f"sqlite: {len(trials)} trials by {WRITERS} writers in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    _writer(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
