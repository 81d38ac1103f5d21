"""The objective of a group of models on one server: each model's figure against its own figure in
the baseline group, weighted, folded into one number to minimise (1.0 = the baseline group).

A model's ratio is lower-is-better whatever its metric: ``value / baseline`` for a minimised metric
(TTFT), ``baseline / value`` for a maximised one (throughput). ``worst`` (the default) scores the
group by its worst model, a model's gain or loss counted ``weight`` times (``1 + weight x (ratio - 1)``):
no model is sacrificed for another's gain. ``weighted_sum`` is the weighted mean of the ratios.
A model that failed, or broke its own constraints, makes the group infeasible, named by model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["GROUP_MODES", "GroupMode", "GroupScore", "ModelOutcome", "group_score"]

GroupMode = Literal["worst", "weighted_sum"]
GROUP_MODES: tuple[str, ...] = ("worst", "weighted_sum")


@dataclass(frozen=True)
class ModelOutcome:
    """One model's part of a group trial: its objective figure (None: it failed), its figure in the
    baseline group, its weight and why it broke its own constraints (empty: it kept them)."""

    name: str
    value: float | None
    baseline: float | None
    weight: float = 1.0
    violations: tuple[str, ...] = field(default=())
    failure: str | None = None


@dataclass(frozen=True)
class GroupScore:
    value: float | None  # None: infeasible (or no baseline figure to compare with)
    ratios: Mapping[str, float]  # each model's lower-is-better ratio to its baseline figure
    reasons: tuple[str, ...]  # why it is infeasible, one per model (empty: feasible)

    @property
    def feasible(self) -> bool:
        return not self.reasons and self.value is not None


def _ratio(o: ModelOutcome, direction: str) -> float | None:
    if o.value is None or o.baseline is None or o.value <= 0 or o.baseline <= 0:
        return None
    return o.value / o.baseline if direction == "minimize" else o.baseline / o.value


def group_score(
    outcomes: Sequence[ModelOutcome], *, direction: Literal["minimize", "maximize"], mode: GroupMode = "worst"
) -> GroupScore:
    """The group's score (minimised; the baseline group scores 1.0) and why it is infeasible, if it is."""
    reasons: list[str] = []
    ratios: dict[str, float] = {}
    for o in outcomes:
        if o.failure is not None or o.value is None:
            reasons.append(f"{o.name}: {o.failure or 'no figure'}")
            continue
        if o.violations:
            reasons.append(f"{o.name}: {'; '.join(o.violations)}")
        ratio = _ratio(o, direction)
        if ratio is not None:
            ratios[o.name] = ratio
    if reasons or len(ratios) < len(outcomes):
        return GroupScore(None, ratios, tuple(reasons))
    weights = {o.name: o.weight for o in outcomes}
    if mode == "weighted_sum":
        value = sum(weights[n] * r for n, r in ratios.items()) / sum(weights.values())
    else:
        value = max(1 + weights[n] * (r - 1) for n, r in ratios.items())
    return GroupScore(value, ratios, ())
