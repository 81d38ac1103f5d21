"""Resume after a kill (issue 30 item 1): a trial whose process is gone is failed at once, the study
keeps one baseline (measured first, ahead of queued candidates), and the trials asked for are the
trials run. Real Optuna and SQLite (heartbeats on, 60 s grace as in the tool); no vLLM."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.bench import RequestTiming, summarize
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    Figures,
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    load_or_create,
    run_study,
)
from tests.fakes.evaluators import OverWords

optuna.logging.set_verbosity(optuna.logging.WARNING)
_State = optuna.trial.TrialState

SPACE = SearchSpace.model_validate(
    {
        "name": "t",
        "platform": "cpu",
        "parameters": {
            "block_size": {"type": "categorical", "choices": [16, 32, 64], "flag": "--block-size"}
        },
    }
)


class Evaluator(OverWords):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def measure(self, number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        self.calls.append(tuple(rendered.args))
        t = [RequestTiming(f"r{i}", None, 0.0, 0.0, 0.02, 0.05, (0.01,) * 3, 4, 8) for i in range(4)]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(t, 1.0).as_dict()))


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _killed_in_the_baseline(tmp_path: Path, owner_pid: int) -> optuna.Study:
    """A study as a run killed during its baseline leaves it: the baseline RUNNING (owned by a
    process now gone, heartbeat fresh), a candidate of the prior queued behind it."""
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    study.enqueue_trial({"block_size": 64})  # the prior's candidate
    with warnings.catch_warnings():  # "heartbeat ... with Study.optimize": this stands for that loop
        warnings.simplefilter("ignore", UserWarning)
        base = study.ask()
    assert base.user_attrs.get("baseline")
    started = psutil.Process(owner_pid).create_time() if psutil.pid_exists(owner_pid) else 0.0
    base.set_user_attr("owner", {"host": socket.gethostname(), "pid": owner_pid, "started": started})
    study._storage.record_heartbeat(base._trial_id)  # fresh: well inside the 60 s grace
    return study


def _baselines(study: optuna.Study, state: _State) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(states=(state,)) if t.user_attrs.get("baseline")]


@pytest.mark.parametrize("n_trials", [1, 3])
def test_a_baseline_whose_process_is_gone_is_failed_and_measured_once_first(
    tmp_path: Path, dead_pid: int, n_trials: int
) -> None:
    study = _killed_in_the_baseline(tmp_path, dead_pid)
    ev = Evaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=Objective()), ev, n_trials)
    assert study.get_trials()[0].state is _State.FAIL  # at once, not after the grace
    assert not study.get_trials(states=(_State.RUNNING,))
    assert ev.calls[0] == ()  # the baseline ran first, ahead of the queued candidate
    (base,) = _baselines(study, _State.COMPLETE)
    assert base.user_attrs.get("duplicate_of") is None
    assert not _baselines(study, _State.WAITING)
    assert len([t for t in study.get_trials() if t.number > 0 and t.state.is_finished()]) == n_trials


def test_a_trial_whose_process_lives_is_left_running(tmp_path: Path, live_pid: int) -> None:
    study = _killed_in_the_baseline(tmp_path, live_pid)  # e.g. another worker, measuring it now
    ev = Evaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=Objective(), baseline_elsewhere=True), ev, 1)
    assert study.get_trials()[0].state is _State.RUNNING
    assert not _baselines(study, _State.COMPLETE) and ev.calls == [("--block-size", "64")]


def test_each_trial_records_its_owner(tmp_path: Path) -> None:
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    run_study(study, TrialPolicy(space=SPACE, objective=Objective()), Evaluator(), 2)
    for t in study.get_trials():
        assert t.user_attrs["owner"]["pid"] == os.getpid()
        assert t.user_attrs["owner"]["host"] == socket.gethostname()
