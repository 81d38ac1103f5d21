"""Faults the study loop must survive (issue 17): a storage that fails while recording, a trial
left RUNNING by a dead process, a value the engine refused, requests that cannot fit, bad URLs.
Real Optuna and SQLite; an in-process evaluator stands in for vLLM."""

from __future__ import annotations

import json
import time
from pathlib import Path

import optuna
import pytest
from sqlalchemy.exc import OperationalError

from autotune.bench import RequestTiming, summarize
from autotune.errors import StorageError, WorkloadError
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    Figures,
    Objective,
    PendingJournal,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    failure_summary,
    load_or_create,
    open_storage,
    read_record,
    resolve_storage_url,
    run_study,
    standard_gates,
)
from autotune.trial import check_request_sizes
from autotune.workload import load_workload
from tests.fakes.evaluators import OverWords, over_words

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = SearchSpace.model_validate(
    {
        "name": "t",
        "platform": "cpu",
        "parameters": {"block_size": {"type": "categorical", "choices": [7, 32, 64], "flag": "--block-size"}},
    }
)


class Evaluator(OverWords):
    """Block size 7 is refused by the 'engine' at start, as the CPU build refuses it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def measure(self, number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        self.calls.append(rendered.args)
        if "7" in rendered.args:
            return TrialRecord(status=TrialStatus.FAILED, failure="bad_flag", reason="block size 7 refused")
        t = [RequestTiming(f"r{i}", None, 0.0, 0.0, 0.02, 0.05, (0.01,) * 3, 4, 8) for i in range(4)]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(t, 1.0).as_dict()))


def _study(tmp_path: Path) -> optuna.Study:
    return load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)


def test_a_value_the_engine_refused_is_not_launched_again(tmp_path: Path) -> None:
    study = _study(tmp_path)
    ev = Evaluator()
    for params in ({"block_size": 32}, {"block_size": 7}, {"block_size": 7}):
        study.enqueue_trial(params)
    run_study(
        study,
        TrialPolicy(space=SPACE, objective=Objective(), gates=standard_gates(reuse_duplicates=False)),
        ev,
        4,
    )
    assert ev.calls.count(("--block-size", "7")) == 1  # the second config with 7 never started
    last = read_record(study.get_trials()[-1])
    assert last.status is TrialStatus.INFEASIBLE and "block_size=7 was refused by the engine" in (
        last.reason or ""
    )


def test_a_storage_failure_is_one_line_and_the_measurement_is_recovered(tmp_path: Path, monkeypatch) -> None:
    study = _study(tmp_path)
    journal = PendingJournal(tmp_path)
    storage = study._storage
    real = storage.set_trial_user_attr
    calls = {"n": 0}

    def full_disk(trial_id: int, key: str, value: object) -> None:
        if key == "status" and study.trials[-1].number == 1:
            calls["n"] += 1
            raise OperationalError("INSERT ...", {}, Exception("database or disk is full"))
        real(trial_id, key, value)

    monkeypatch.setattr(storage, "set_trial_user_attr", full_disk)
    with pytest.raises(StorageError) as err:
        run_study(study, TrialPolicy(space=SPACE, objective=Objective(), journal=journal), Evaluator(), 3)
    assert "database or disk is full" in str(err.value) and str(journal.directory) in str(err.value)
    assert "\n" not in str(err.value)
    assert len(journal.pending()) == 1
    monkeypatch.setattr(storage, "set_trial_user_attr", real)

    again = _study(tmp_path)
    assert journal.replay(again) == 1
    recovered = [t for t in again.trials if t.user_attrs.get("recovered_from_trial") == 1]
    assert len(recovered) == 1 and recovered[0].state is optuna.trial.TrialState.COMPLETE
    assert read_record(recovered[0]).ok and recovered[0].value is not None
    assert journal.pending() == []


def test_a_trial_left_running_by_a_dead_process_fails_and_is_retried(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hb.db'}"
    storage = open_storage(url, heartbeat_s=1, grace_s=2)
    study = optuna.create_study(study_name="hb", storage=storage)
    dead = study.ask({"block_size": optuna.distributions.CategoricalDistribution([7, 32, 64])})
    storage.record_heartbeat(dead._trial_id)  # then the process "dies": no more heartbeats
    time.sleep(3)
    ev = Evaluator()
    live = optuna.load_study(study_name="hb", storage=open_storage(url, heartbeat_s=1, grace_s=2))
    run_study(live, TrialPolicy(space=SPACE, objective=Objective()), ev, 2)
    states = {t.number: t.state for t in live.get_trials()}
    assert states[dead.number] is optuna.trial.TrialState.FAIL  # no longer RUNNING forever
    retried = [t for t in live.get_trials() if t.system_attrs.get("failed_trial") == dead.number]
    assert len(retried) == 1


def test_a_bad_storage_url_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as err:
        resolve_storage_url("postgresql+psycopg://u@h:notaport/db", "s", tmp_path)
    assert "not a SQLAlchemy URL" in str(err.value) and "\n" not in str(err.value)


def _workload(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_request_longer_than_the_model_is_a_located_error_or_skipped(tmp_path: Path) -> None:
    wl = load_workload(
        _workload(
            tmp_path / "w.jsonl",
            [
                {"prompt": "word " * 50, "max_tokens": 10},
                {"prompt": "word " * 500, "max_tokens": 10},
                {"prompt": "hi", "max_tokens": 2_000_000},
            ],
        )
    )
    fixed = (("--max-model-len", "256"),)
    with pytest.raises(WorkloadError, match=r"w.jsonl:2: .*exceed the max model length 256"):
        check_request_sizes(wl, str(tmp_path), fixed, skip_bad_lines=False)
    kept = check_request_sizes(wl, str(tmp_path), fixed, skip_bad_lines=True)
    assert [r.line for r in kept.requests] == [1]
    assert any("w.jsonl:3" in s and "absurd" in s for s in kept.skipped)


def test_a_study_of_only_failed_requests_names_the_workload_not_the_space(tmp_path: Path) -> None:
    study = _study(tmp_path)

    @over_words
    def refused(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        bad = [
            RequestTiming(
                "r", None, 0.0, 0.0, None, None, (), 0, None, error="HTTP 400: too long", status=400
            )
        ]
        good = [RequestTiming("g", None, 0.0, 0.0, 0.02, 0.05, (0.01,), 2, 4)]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(bad + good, 1.0).as_dict()))

    run_study(study, TrialPolicy(space=SPACE, objective=Objective()), refused, 2)
    summary = failure_summary(study)
    assert summary is not None and "not the search space" in summary and "HTTP 400" in summary
