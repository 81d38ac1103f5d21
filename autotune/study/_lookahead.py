"""Overlapped starts, the study's half (issue 31, item 4): once a trial's engine is up, the next
trial is asked for now and, when it would launch, its engine is started beside the running one
(the evaluator decides whether both fit). The trial then runs at its turn as any other, taking its
engine already started, or starting one as usual.

A trial asked ahead that does not run (the study stopped: its trial count, budget or a signal) goes
back to WAITING with its values, so the next run, or another worker, takes it first; its engine is
stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from autotune.study._gates import is_baseline
from autotune.study._measure import TrialMeasure
from autotune.study._orphans import claim_trial
from autotune.study._record import Prestarter

__all__ = ["Lookahead"]

log = logging.getLogger(__name__)
_State = optuna.trial.TrialState


@dataclass
class Lookahead:
    """``ask``: the runner's own ask (a waiting baseline first); ``wanted()``: whether another trial
    will follow the current one."""

    study: optuna.Study
    measure: TrialMeasure
    ask: Callable[[], optuna.Trial]
    wanted: Callable[[], bool]
    trial: optuna.Trial | None = None

    def on_engine_up(self, current: optuna.Trial) -> None:
        evaluator = self.measure.evaluator
        if self.trial is not None or not isinstance(evaluator, Prestarter) or not self.wanted():
            return
        try:
            trial = self.ask()
            claim_trial(trial)
        except Exception as exc:
            log.warning("overlapped start: could not ask for the next trial: %s", exc)
            return
        self.trial = trial
        if is_baseline(trial):
            return  # the baseline's values are settled at its turn (a re-check may change them)
        config = self.measure.launch_config(trial, self.measure.values(trial))
        if config is None:
            return  # a gate stands in for its launch
        why = evaluator.prestart(trial.number, config)
        if why is None:
            log.info("trial %d: engine started while trial %d replays", trial.number, current.number)
        else:
            log.info("trial %d: not started early: %s", trial.number, why)

    def take(self) -> optuna.Trial | None:
        trial, self.trial = self.trial, None
        return trial

    def done(self, number: int) -> None:
        """Trial ``number`` finished: an engine started ahead for it and not taken (a gate's verdict
        stood at its turn) is stopped now, not left holding memory."""
        evaluator = self.measure.evaluator
        if isinstance(evaluator, Prestarter):
            evaluator.discard_prestart(number)

    def release(self) -> None:
        """The study stops: the trial asked ahead goes back to WAITING, its engine is stopped."""
        evaluator = self.measure.evaluator
        if isinstance(evaluator, Prestarter):
            evaluator.discard_prestart()
        trial, self.trial = self.trial, None
        if trial is None:
            return
        try:
            self.study._storage.set_trial_state_values(trial._trial_id, state=_State.WAITING)
            log.info("trial %d was asked ahead and not run: waiting for the next run", trial.number)
        except Exception as exc:
            log.warning("trial %d asked ahead could not go back to waiting: %s", trial.number, exc)
