"""Which measured trial is best: shared by the study loop and the pruner."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.study._record import constraints_hold, read_record

__all__ = ["best_feasible", "completed_trials", "in_scope"]


def in_scope(trial: optuna.trial.FrozenTrial, scope: Mapping[str, Any] | None) -> bool:
    """Whether the trial carries every user attr of ``scope`` (e.g. tonight's night); no scope: all."""
    return not scope or all(trial.user_attrs.get(k) == v for k, v in scope.items())


def completed_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


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
