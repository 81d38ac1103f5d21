"""Overlapped starts, the study's half: once a trial's engine is up, the next trial is asked for and
its engine started ahead; a trial asked ahead that does not run goes back to WAITING (issue 31)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.space import EngineConfig, RenderedConfig
from autotune.study import (
    BASELINE_ATTR,
    Objective,
    Prestarter,
    TrialHooks,
    TrialPolicy,
    TrialRecord,
    load_or_create,
    run_study,
)
from tests.unit.study.test_study_runner import SPACE, FakeEvaluator

_State = optuna.trial.TrialState


@pytest.fixture
def storage_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


class AheadEvaluator(FakeEvaluator):
    """The fake evaluator, telling the study its engine is up (``listener.engine_up()``) as the real one does,
    and recording what it was asked to start ahead."""

    def __init__(self, refuse: str | None = None) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []
        self.ahead: dict[int, RenderedConfig] = {}
        self.refuse = refuse
        self.discarded = 0

    def measure(self, number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        took = self.ahead.pop(number, None)
        self.events.append(("took" if took == rendered else "started", number))
        if listener is not None:
            listener.engine_up()  # type: ignore[attr-defined]  # the runner may start the next one now
        return super().measure(number, rendered, listener)

    def prestart(self, number: int, config: EngineConfig) -> str | None:
        rendered = self.render(config)
        if self.refuse is not None:
            return self.refuse
        self.events.append(("ahead", number))
        self.ahead[number] = rendered
        return None

    def discard_prestart(self, number: int | None = None) -> None:
        for n in [n for n in self.ahead if number is None or n == number]:
            del self.ahead[n]
            self.discarded += 1
            self.events.append(("discarded", n))


def test_the_evaluator_of_real_vllm_is_a_prestarter() -> None:
    from autotune.trial import VllmEvaluator

    assert issubclass(VllmEvaluator, Prestarter)


def test_each_next_engine_starts_while_the_current_trial_runs_and_its_trial_takes_it(
    storage_url: str,
) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    ev = AheadEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective, overlap=True), ev, 4)

    trials = study.get_trials()
    assert [t.state for t in trials] == [_State.COMPLETE] * 4
    assert trials[0].user_attrs[BASELINE_ATTR] is True
    # trial 0 starts at its turn; 1, 2, 3 start while the one before them runs and take that engine;
    # nothing is started ahead of the last trial (the run ends with it)
    assert ev.events == [
        ("started", 0), ("ahead", 1), ("took", 1), ("ahead", 2), ("took", 2), ("ahead", 3), ("took", 3),
    ]  # fmt: skip
    assert [n for n, _ in ev.calls] == [0, 1, 2, 3]
    assert ev.discarded == 0


def test_without_overlap_nothing_starts_ahead(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    ev = AheadEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective), ev, 3)
    assert [kind for kind, _ in ev.events] == ["started"] * 3


def test_a_trial_asked_ahead_that_does_not_run_waits_for_the_next_run_with_its_values(
    storage_url: str,
) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    ev = AheadEvaluator()
    done: list[int] = []
    run_study(study, TrialPolicy(space=SPACE, objective=objective, overlap=True), ev, None, TrialHooks(on_done=lambda rep: done.append(rep.number), should_stop=lambda: len(done) >= 2))  # fmt: skip
    # trial 2 was asked and started ahead while trial 1 ran; the study stopped after trial 1
    assert ev.discarded == 1
    waiting = study.get_trials(states=(_State.WAITING,))
    assert [t.number for t in waiting] == [2]
    asked = waiting[0].params
    assert asked  # it keeps the values the sampler gave it

    ev2 = AheadEvaluator()
    study = load_or_create(storage_url, "s", objective, seed=0)
    run_study(study, TrialPolicy(space=SPACE, objective=objective), ev2, 1)
    assert [n for n, _ in ev2.calls] == [2]
    assert study.trials[2].state is _State.COMPLETE and study.trials[2].params == asked


def test_a_refused_early_start_leaves_the_trial_to_start_at_its_turn(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    ev = AheadEvaluator(refuse="GPU 0 has 3.0 GiB free beside the running engine")
    run_study(study, TrialPolicy(space=SPACE, objective=objective, overlap=True), ev, 3)
    assert ev.events == [("started", 0), ("started", 1), ("started", 2)]
    assert [t.state for t in study.get_trials()] == [_State.COMPLETE] * 3


def test_a_gated_next_trial_is_not_started_ahead(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    run_study(study, TrialPolicy(space=SPACE, objective=objective), FakeEvaluator(), 1)
    study.enqueue_trial({"block_size": 32, "offload_gb": 0})
    study.enqueue_trial({"block_size": 32, "offload_gb": 0})  # a twin of the one before: reused
    study.enqueue_trial({"block_size": 64, "offload_gb": 0})
    ev = AheadEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective, overlap=True), ev, 3)
    # trial 2 was asked while trial 1 ran, when 1 was not measured yet: it was started ahead; at its
    # turn its twin's measurement stood, so its engine was stopped then, unused; trial 3 had no
    # running engine to start beside and started at its turn
    assert ev.events == [("started", 1), ("ahead", 2), ("discarded", 2), ("started", 3)]
    assert [n for n, _ in ev.calls] == [1, 3]
    assert [t.state for t in study.trials] == [_State.COMPLETE] * 4


@pytest.mark.parametrize("n", [1])
def test_a_single_trial_run_asks_nothing_ahead(storage_url: str, n: int) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    ev = AheadEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective, overlap=True), ev, n)
    assert ev.events == [("started", 0)]
    assert not study.get_trials(states=(_State.WAITING,))
