"""The objective of a group of models on one server: each model's figure against its own figure in
the baseline group, weighted, folded into one number to minimise (1.0 = the baseline group).

A model's ratio is lower-is-better whatever its metric: ``value / baseline`` for a minimised metric
(TTFT), ``baseline / value`` for a maximised one (throughput). The group study file's
``group_objective:`` picks how the ratios fold:

- ``pareto`` (the default): the weighted geometric mean of the ratios, so one model's gain counts
  when the others hold (0.6x and 1.0x score 0.77). A group in which any model is worse than its
  baseline beyond the noise floor is infeasible, named by model and figure: no model is sacrificed
  for another's gain.
- ``worst``: the group's worst model, a model's gain or loss counted ``weight`` times
  (``1 + weight x (ratio - 1)``); a one-sided gain scores 1.0, no gain.
- ``weighted_sum``: the weighted mean of the ratios.

In every mode a model that failed, or broke its own constraints (its SLOs), makes the group
infeasible, named by model."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from autotune.studyfile import GROUP_MODES, GroupMode

__all__ = [
    "GROUP_MODES",
    "GroupMode",
    "GroupScore",
    "ModelOutcome",
    "figure_label",
    "fold_group",
    "group_score",
    "model_ratio",
    "worse_beyond_noise",
]


@dataclass(frozen=True)
class ModelOutcome:
    """One model's part of a group trial: its objective figure (None: it failed), its figure in the
    baseline group, its weight and why it broke its own constraints (empty: it kept them);
    ``metric``: the figure's name (``ttft_p90``), as an infeasible group names it; ``relative``: the
    constraints it broke against its baseline's figures (its throughput floor), apart from the
    absolute ones (its SLOs) because a re-measurement judges those on its medians."""

    name: str
    value: float | None
    baseline: float | None
    weight: float = 1.0
    violations: tuple[str, ...] = field(default=())
    failure: str | None = None
    metric: str = ""
    relative: tuple[str, ...] = field(default=())  # constraints it broke against its baseline (throughput)


@dataclass(frozen=True)
class GroupScore:
    value: float | None  # None: infeasible (or no baseline figure to compare with)
    ratios: Mapping[str, float]  # each model's lower-is-better ratio to its baseline figure
    reasons: tuple[str, ...]  # why it is infeasible, one per model (empty: feasible)
    worse: tuple[
        str, ...
    ] = ()  # models worse than their baseline: beyond the noise (pareto), or its throughput
    broken: tuple[str, ...] = ()  # the reasons no re-measurement overturns: a failure, an SLO broken

    @property
    def feasible(self) -> bool:
        return not self.reasons and self.value is not None


def figure_label(metric: str) -> str:
    """A figure's name as a sentence says it: ``p90 TTFT``, ``output throughput``."""
    head, _, tail = metric.partition("_")
    if (tail[:1] == "p" and tail[1:].isdigit()) or tail == "mean":
        return f"{tail} {head.upper()}"
    return metric.replace("_", " ")


def model_ratio(o: ModelOutcome, direction: str) -> float | None:
    """A model's lower-is-better ratio to its baseline figure (None: either figure missing)."""
    if o.value is None or o.baseline is None or o.value <= 0 or o.baseline <= 0:
        return None
    return o.value / o.baseline if direction == "minimize" else o.baseline / o.value


def worse_beyond_noise(
    name: str, metric: str, ratio: float, noise: float, direction: str, source: str = "noise floor"
) -> str | None:
    """Why a model's ratio (lower is better) is worse than its baseline beyond ``noise`` (None: it is
    not), in the figure's own terms: TTFT 1.20x its baseline, throughput 0.83x."""
    if ratio <= 1 + noise:
        return None
    shown = ratio if direction == "minimize" else 1 / ratio
    label = f" {figure_label(metric)}" if metric else ""
    return f"infeasible: {name}{label} {shown:.2f}x its baseline, beyond the {noise:.0%} {source}"


def fold_group(ratios: Mapping[str, float], weights: Mapping[str, float], mode: GroupMode) -> float:
    """The group's one number from each model's ratio (``mode``: see the module's doc)."""
    total = sum(weights[n] for n in ratios)
    if mode == "pareto":
        return math.exp(sum(weights[n] * math.log(r) for n, r in ratios.items()) / total)
    if mode == "weighted_sum":
        return sum(weights[n] * r for n, r in ratios.items()) / total
    return max(1 + weights[n] * (r - 1) for n, r in ratios.items())


def group_score(
    outcomes: Sequence[ModelOutcome],
    *,
    direction: Literal["minimize", "maximize"],
    mode: GroupMode = "pareto",
    noise: float = 0.03,
) -> GroupScore:
    """The group's score (minimised; the baseline group scores 1.0) and why it is infeasible, if it
    is; ``noise``: the floor beyond which a model counts as worse (``pareto``: the study's
    ``min_improvement``)."""
    reasons: list[str] = []
    broken: list[str] = []
    worse: dict[str, None] = {}
    ratios: dict[str, float] = {}
    for o in outcomes:
        if o.failure is not None or o.value is None:
            broken.append(f"{o.name}: {o.failure or 'no figure'}")
            reasons.append(broken[-1])
            continue
        if o.violations:
            broken.append(f"{o.name}: {'; '.join(o.violations)}")
            reasons.append(broken[-1])
        if o.relative:
            reasons.append(f"{o.name}: {'; '.join(o.relative)}")
            worse[o.name] = None
        ratio = model_ratio(o, direction)
        if ratio is None:
            continue
        ratios[o.name] = ratio
        why = worse_beyond_noise(o.name, o.metric, ratio, noise, direction) if mode == "pareto" else None
        if why is not None:
            reasons.append(why)
            worse[o.name] = None
    if reasons or len(ratios) < len(outcomes):
        return GroupScore(None, ratios, tuple(reasons), tuple(worse), tuple(broken))
    return GroupScore(fold_group(ratios, {o.name: o.weight for o in outcomes}, mode), ratios, ())
