"""The study runner: it owns the loop, ask -> run -> tell, as Optuna's ``_run_trial`` does, for
``run``, ``worker`` and ``nightly`` alike.

Before each trial it fails the trials whose process is gone (see ``_orphans``); it asks for the
next trial, taking a waiting baseline first while the study has no measured one (a baseline
enqueued again after a kill must not wait behind the prior's candidates); it records this process
as the trial's owner and keeps its heartbeat while the trial runs; the trial's values pass the
gates (``_gates``) before the evaluator is asked (``_measure``); then the outcome is told to Optuna.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import optuna
from optuna.storages._heartbeat import get_heartbeat_thread

from autotune.errors import StorageError
from autotune.study._baseline import baseline_trial
from autotune.study._best import best_feasible
from autotune.study._gates import is_baseline
from autotune.study._journal import PendingJournal, storage_fault
from autotune.study._lookahead import Lookahead
from autotune.study._measure import TrialMeasure
from autotune.study._orphans import claim_trial, fail_orphaned_trials
from autotune.study._policy import TrialPolicy
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import (
    BASELINE_ATTR,
    Evaluator,
    TrialRecord,
    TrialStatus,
    constraints_hold,
    read_record,
)

__all__ = ["Measure", "StudyRunner", "TrialHooks", "TrialReport", "run_study"]

log = logging.getLogger(__name__)
_State = optuna.trial.TrialState


@dataclass(frozen=True)
class TrialReport:
    """What the CLI shows after each trial."""

    number: int
    params: Mapping[str, Any]
    record: TrialRecord
    value: float | None
    feasible: bool
    best_number: int | None
    best_value: float | None


class Measure(Protocol):
    """How the runner's trials are measured: one engine's (:class:`TrialMeasure`) or a group's of N.
    ``begin``: once a run, before its first trial (one engine: the baseline enqueued unless measured);
    ``before_ask``: before each ask (a group enqueues its baseline split or its prior's); ``values``:
    the trial's values; the call measures them and records the outcome: the objective value, or None
    (told PRUNED, no value, its constraints set)."""

    @property
    def journal(self) -> PendingJournal | None: ...

    @property
    def pruner(self) -> IncumbentPruner | None: ...

    def begin(self, study: optuna.Study, *, running_counts: bool) -> None: ...

    def before_ask(self, study: optuna.Study) -> None: ...

    def values(self, trial: optuna.Trial) -> dict[str, Any]: ...

    def __call__(self, trial: optuna.Trial, values: Mapping[str, Any]) -> float | None: ...


@dataclass(frozen=True)
class TrialHooks:
    """What a caller hears of the loop: ``on_start(number, is_baseline, values)`` before a trial,
    ``on_done(report)`` after it; ``should_stop()`` is asked after each trial."""

    on_start: Callable[[int, bool, Mapping[str, Any]], None] | None = None
    on_done: Callable[[TrialReport], None] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass
class StudyRunner:
    """Runs trials of ``study``, each measured by ``measure``. ``trial_attrs`` are stored on every
    trial run now (the nightly command tags its night); ``baseline_elsewhere``: another live
    worker may be measuring the baseline right now."""

    study: optuna.Study
    measure: Measure
    hooks: TrialHooks = field(default_factory=TrialHooks)
    trial_attrs: Mapping[str, Any] = field(default_factory=dict)
    baseline_elsewhere: bool = False
    overlap: bool = False  # start the next trial's engine while the current one replays, when both fit
    after_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None
    _more: bool = field(default=False, init=False, repr=False)
    _ahead: Lookahead | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.overlap:
            assert isinstance(self.measure, TrialMeasure), "overlapped starts are one engine's"
            self._ahead = Lookahead(self.study, self.measure, self._ask, lambda: self._more)
            self.measure = replace(self.measure, on_engine_up=self._ahead.on_engine_up)

    def run(self, n_trials: int | None, timeout_s: float | None = None) -> optuna.Study:
        """Run ``n_trials`` more trials (None: until ``timeout_s`` or ``should_stop``); a study
        without a measured baseline measures it first."""
        fail_orphaned_trials(self.study)
        self.measure.begin(self.study, running_counts=self.baseline_elsewhere)
        if self.measure.pruner is not None:
            self.study.pruner = self.measure.pruner
        started, ran = time.monotonic(), 0
        try:
            while n_trials is None or ran < n_trials:
                if timeout_s is not None and time.monotonic() - started >= timeout_s:
                    break
                self._more = n_trials is None or ran + 1 < n_trials
                frozen = self.run_one()
                ran += 1
                self._after(frozen)
                if self.hooks.should_stop is not None and self.hooks.should_stop():
                    break
        except Exception as exc:
            cause = storage_fault(exc)
            if cause is None:
                raise
            journal = self.measure.journal
            kept = (
                f"; the measurement is kept in {journal.directory} and added on the next run"
                if journal
                else ""
            )
            raise StorageError(f"the study storage failed while recording a trial: {cause}{kept}") from exc
        finally:
            if self._ahead is not None:
                self._ahead.release()
            self.study._storage.remove_session()
        return self.study

    def run_one(self) -> optuna.trial.FrozenTrial:
        """Ask, run, tell: one trial; what the storage holds of it afterwards."""
        fail_orphaned_trials(self.study)
        trial = self._ahead.take() if self._ahead is not None else None
        if trial is None:
            self.measure.before_ask(self.study)
            trial = self._ask()
            claim_trial(trial)
        state, value, error = _State.COMPLETE, None, None
        with get_heartbeat_thread(trial._trial_id, self.study._storage):
            try:
                value = self._run(trial)
            except optuna.TrialPruned as exc:
                state = _State.PRUNED
                log.info("trial %d pruned: %s", trial.number, exc)
            except (Exception, KeyboardInterrupt) as exc:
                state, error = _State.FAIL, exc
            finally:
                if self._ahead is not None:
                    self._ahead.done(trial.number)
        if state is _State.COMPLETE and value is None:  # ended without a measurement: as Optuna
            frozen = self.study.tell(trial, state=_State.PRUNED)  # keeps one (no value, constraints set)
        elif state is _State.COMPLETE:
            frozen = self.study.tell(trial, value)
        else:
            frozen = self.study.tell(trial, state=state)
        if error is not None:
            log.warning("trial %d failed: %r", trial.number, error)
            raise error
        return frozen

    def _ask(self) -> optuna.Trial:
        """Optuna's next trial, except that a waiting baseline goes first while none is measured."""
        study = self.study
        waiting = study.get_trials(deepcopy=False, states=(_State.WAITING,))
        base = next((t for t in waiting if t.user_attrs.get(BASELINE_ATTR)), None)
        if base is not None and base is not waiting[0] and baseline_trial(study) is None:
            try:
                if study._storage.set_trial_state_values(base._trial_id, state=_State.RUNNING):
                    study._thread_local.cached_all_trials = None
                    return optuna.Trial(study, base._trial_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # taken and finished by another worker meanwhile
        with (
            warnings.catch_warnings()
        ):  # "heartbeat ... supposed to be used with Study.optimize": this is that loop
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            return study.ask()

    def _run(self, trial: optuna.Trial) -> float | None:
        for key, val in self.trial_attrs.items():
            trial.set_user_attr(key, val)
        values = self.measure.values(trial)
        baseline = is_baseline(trial)  # a group's baseline is marked as its values are chosen
        label = "baseline" + (f" (reference {values})" if values else " (vLLM defaults)")
        log.info("trial %d %s", trial.number, label if baseline else values)
        if self.hooks.on_start is not None:
            self.hooks.on_start(trial.number, baseline, values)
        return self.measure(trial, values)

    def _after(self, frozen: optuna.trial.FrozenTrial) -> None:
        if self.measure.journal is not None:
            self.measure.journal.discard(frozen.number)  # the storage holds it now
        if self.after_trial is not None:
            self.after_trial(self.study, self.study._storage.get_trial(frozen._trial_id))
        if self.hooks.on_done is None:
            return
        best = best_feasible(self.study)
        rec = read_record(frozen)
        report = TrialReport(
            number=frozen.number,
            params=frozen.params,
            record=rec,
            value=frozen.value if rec.status is TrialStatus.OK else None,
            feasible=rec.ok and constraints_hold(rec.constraints or (1.0,)),
            best_number=best.number if best else None,
            best_value=best.value if best else None,
        )
        self.hooks.on_done(report)


def run_study(
    study: optuna.Study,
    policy: TrialPolicy,
    evaluator: Evaluator,
    n_trials: int | None,
    hooks: TrialHooks | None = None,
    timeout_s: float | None = None,
) -> optuna.Study:
    """:class:`StudyRunner` as one call: ``n_trials`` more trials of ``study`` (None: until
    ``timeout_s`` or ``hooks.should_stop``), each run as ``policy`` says and measured by ``evaluator``."""
    runner = StudyRunner(
        study,
        policy.measure(study, evaluator),
        hooks or TrialHooks(),
        dict(policy.trial_attrs),
        policy.baseline_elsewhere,
        policy.overlap,
        policy.after_trial,
    )
    return runner.run(n_trials, timeout_s)
