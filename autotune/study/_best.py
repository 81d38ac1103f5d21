"""Which measured trial is best: shared by the study loop and the pruner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.study._record import constraints_hold, read_record

__all__ = ["best_feasible", "completed_trials", "in_scope", "unmeasured"]


def in_scope(trial: optuna.trial.FrozenTrial, scope: Mapping[str, Any] | None) -> bool:
    """Whether the trial carries every user attr of ``scope`` (e.g. tonight's night); no scope: all."""
    return not scope or all(trial.user_attrs.get(k) == v for k, v in scope.items())


def unmeasured(trial: optuna.trial.FrozenTrial) -> bool:
    """A trial that ended without a measurement (it failed, or was infeasible or refused before a
    launch): stored as Optuna stores such a trial, PRUNED with no value and its constraints violated
    (TPE ranks it infeasible; optuna-dashboard plots no value), never with a sentinel objective.
    Not a trial the pruner stopped: that one is PRUNED too, with its own record."""
    if trial.state is not optuna.trial.TrialState.PRUNED:
        return False
    status = trial.user_attrs.get("status")
    return status is not None and status != "pruned" and status != "ok"


def completed_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Every trial with an outcome: the measured (COMPLETE, with a value) and the :func:`unmeasured`
    (no value); not those the pruner stopped, nor the running or waiting ones."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return [
        t
        for t in study.get_trials(deepcopy=False, states=states)
        if t.state is optuna.trial.TrialState.COMPLETE or unmeasured(t)
    ]


def best_feasible(
    study: optuna.Study, where: Callable[[optuna.trial.FrozenTrial], bool] | None = None
) -> optuna.trial.FrozenTrial | None:
    """The best feasible measured trial (of those ``where`` accepts)."""
    best: optuna.trial.FrozenTrial | None = None
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0
    for t in completed_trials(study):
        if where is not None and not where(t):
            continue
        rec = read_record(t)
        if t.value is None or not rec.ok or not constraints_hold(rec.constraints or (1.0,)):
            continue
        if best is None or sign * t.value < sign * (best.value or 0.0):
            best = t
    return best
