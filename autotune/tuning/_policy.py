"""The study's trial policy, built once from its setup and the scope of this run: what ``run``,
``worker`` and ``nightly`` hand to :func:`autotune.study.run_study` (none of them builds gates,
a pruner or hooks by hand)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.space import SearchSpace
from autotune.study import IncumbentPruner, Objective, PendingJournal, TrialPolicy, standard_gates
from autotune.studyfile import StudySpec
from autotune.tuning._forecast import StudyForecast
from autotune.tuning._prior import Prior

__all__ = ["TrialScope", "trial_policy"]


@dataclass(frozen=True)
class TrialScope:
    """Where this run's trials belong. ``directory``: the journal's (a measurement the storage has
    not taken yet waits there); ``attrs``: stored on every trial (a night's number); ``fresh``:
    measure again what earlier trials measured, except trials whose attributes hold these values,
    and hold candidates against those trials only (a night whose workload or fixed flags changed:
    last night's figures are no incumbent); ``baseline_elsewhere``: another live worker may be
    measuring the baseline; ``before_replay``: called once a trial's engine is up (a worker's gate)."""

    directory: Path
    attrs: Mapping[str, Any] = field(default_factory=dict)
    fresh: Mapping[str, Any] | None = None
    baseline_elsewhere: bool = False
    before_replay: Callable[[], None] | None = None


def trial_policy(
    scope: TrialScope,
    space: SearchSpace,
    objective: Objective,
    prior: Prior | None,
    choices: StudySpec,
    recheck: Callable[[], Mapping[str, Any] | None],
    forecast: StudyForecast | None = None,
) -> TrialPolicy:
    """The gates (reuse, refused values, the prior's veto), the pruner, the prior's prediction,
    the baseline's re-check (``recheck``), the journal and the overlap setting of a study searching
    ``space`` (the prior's when built), for ``scope``; with ``forecast`` (``--predict``), the latency
    model's gate last and its after-trial refit."""
    veto = prior.veto if prior is not None else None
    fresh = dict(scope.fresh) if scope.fresh else None
    gates = standard_gates(reuse_duplicates=fresh is None, veto=veto, scope=fresh)
    if forecast is not None:
        gates = (*gates, forecast)
    pruner = IncumbentPruner(metric=objective.metric, scope=fresh) if choices.prune else None
    return TrialPolicy(
        space=space,
        objective=objective,
        gates=gates,
        pruner=pruner,
        predict=prior.predict if prior is not None else None,
        recheck_baseline=recheck,
        journal=PendingJournal(scope.directory),
        before_replay=scope.before_replay,
        trial_attrs=dict(scope.attrs),
        baseline_elsewhere=scope.baseline_elsewhere,
        overlap=choices.overlap_starts,
        after_trial=forecast.after_trial if forecast is not None else None,
    )
