"""The best group of a study re-measured against the baseline group before it is exported.

Confirmation (as for one engine, ``tuning/_confirm.py``, whose gain verdict it shares): the baseline
group and the best group run alternately, A B A B, ``rounds`` times each, every engine of a group
started as in a trial: the rounds run through ``trial.alternate``, the same alternation as one engine's
compare (``trial.compare_configs``), so the numbers, the order and the runs said are one engine's;
a group's rounds stop after the first round with a failed run. Engines that share a machine move each other's figures (on the H200 the equal
split varied 2x run to run, against one engine's 3%), so each model is held against the noise its
own runs show: the larger of ``min_improvement`` and the spread (max-min over the median) of its
runs in either arm. The best group is confirmed when the group's objective on the models' medians
(each model's median against its own median in the baseline group, folded as the study folds them)
is below 1.0, at least one model gains beyond its noise (median gain, and with two or more rounds
every run of it ahead of every baseline run), and no model is worse than its baseline beyond its
noise. A group not confirmed is not exported as the best: the baseline group is, and the summary
says why, naming each model's noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.study import GroupMode, ModelOutcome, fold_group, member_params, model_ratio, worse_beyond_noise
from autotune.trial import ArmSummary, Comparison, alternate
from autotune.tuning._confirm import ArmVerdict, Noise, judge_gain, run_noise
from autotune.tuning.group._setup import GroupModel, GroupSetup
from autotune.tuning.group._trial import GroupEvaluator, GroupTrialResult

__all__ = ["GroupConfirmation", "confirm_group"]


@dataclass(frozen=True)
class GroupConfirmation:
    """The A B A B re-measurement of the best group against the baseline group."""

    confirmed: bool
    why: str
    ratios: Mapping[str, float]  # each model's median against its baseline median (lower is better)
    value: float | None  # the group's objective on the medians
    noise: Mapping[str, float] = field(default_factory=dict)  # each model's noise, from its own runs


def _values(trial: optuna.trial.FrozenTrial, setup: GroupSetup) -> dict[str, dict[str, Any]]:
    return {m.name: member_params(trial.params, m.name) for m in setup.models}


def _ran(base: GroupTrialResult, cand: GroupTrialResult) -> GroupTrialResult | None:
    """The round's run that failed (None: both measured). A best group only worse than this round's
    baseline (beyond the floor, or below a model's throughput floor) has not failed: the rounds'
    medians, against each model's own spread, judge that."""
    if not base.ok:
        return base
    return None if cand.ok or (cand.measured and not cand.score.broken) else cand


def _ab_rounds(
    evaluate: GroupEvaluator,
    arms: Sequence[tuple[str, optuna.trial.FrozenTrial]],
    setup: GroupSetup,
    rounds: int,
    first_number: int,
    on_run: Callable[[str, int, GroupTrialResult], None] | None,
) -> tuple[Sequence[GroupTrialResult], Sequence[GroupTrialResult], str | None]:
    """The baseline arm and the best arm run alternately, ``rounds`` times each (``trial.alternate``),
    the best judged against this round's baseline; why a run failed ('' when it said no reason: the
    rounds stop there all the same)."""

    def run(
        number: int, trial: optuna.trial.FrozenTrial, this_round: Sequence[GroupTrialResult]
    ) -> GroupTrialResult:
        against = this_round[0] if this_round else None
        return evaluate(number, dict(trial.user_attrs["split"]), _values(trial, setup), against)

    def stop(this_round: Sequence[GroupTrialResult]) -> str | None:
        failed = _ran(*this_round)
        return None if failed is None else failed.reason or ""

    (base, cand), failed = alternate(arms, rounds, run, first_number=first_number, on_run=on_run, stop=stop)
    return base, cand, failed


def _model_comparison(
    name: str, metric: str, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult]
) -> Comparison:
    def arm(label: str, results: Sequence[GroupTrialResult]) -> ArmSummary:
        values = [v for res in results if (v := res.figures(name, metric)) is not None]
        return ArmSummary(label, (), tuple(res.records[name] for res in results), {metric: values})

    return Comparison(a=arm("baseline", base), b=arm("best", cand))


def _model_verdict(
    m: GroupModel, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult], floor: float
) -> tuple[ModelOutcome, Noise, ArmVerdict]:
    """One model's medians in both arms, the noise its own runs show, and whether it gains beyond it."""
    metric, maximize = m.setup.objective.metric, m.setup.objective.direction == "maximize"
    comp = _model_comparison(m.name, metric, base, cand)
    noise = run_noise(comp.a.figures[metric], comp.b.figures[metric], floor)
    outcome = ModelOutcome(m.name, comp.b.median(metric), comp.a.median(metric), m.weight, metric=metric)
    capacity = (
        m.setup.objective.is_capacity
    )  # a capacity only above the baseline's bracket, as for one engine
    return outcome, noise, judge_gain(comp, metric, maximize=maximize, noise=noise.value, capacity=capacity)


def _throughput_short(
    m: GroupModel, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult], floor: float
) -> str | None:
    """Why a model's median throughput falls below its floor (``min_throughput_ratio`` of its baseline
    median) beyond the spread of its own runs (None: it holds)."""
    comp = _model_comparison(m.name, "output_throughput", base, cand)
    a, b = comp.a.median("output_throughput"), comp.b.median("output_throughput")
    if not a or b is None:
        return None
    noise = run_noise(comp.a.figures["output_throughput"], comp.b.figures["output_throughput"], floor)
    need = m.setup.objective.min_throughput_ratio
    if b / a >= need * (1 - noise.value):
        return None
    return f"{m.name} output throughput {b / a:.2f}x its baseline, below its {need:.0%} floor beyond its {noise.text()}"


def _group_verdict(
    setup: GroupSetup,
    mode: GroupMode,
    base: Sequence[GroupTrialResult],
    cand: Sequence[GroupTrialResult],
    floor: float,
) -> GroupConfirmation:
    """Each model's median against its baseline median, held against the noise its own runs show;
    the group confirmed when the group objective on the medians is below 1.0, at least one model
    gains beyond its noise (ranges apart) and none is worse beyond it."""
    direction = setup.models[0].setup.objective.direction
    parts = {m.name: _model_verdict(m, base, cand, floor) for m in setup.models}
    ratios = {n: r for n, (o, _, _) in parts.items() if (r := model_ratio(o, direction)) is not None}
    noise = {n: p[1] for n, p in parts.items()}
    gains = [f"{n} {v.why}" for n, (_, _, v) in parts.items() if v.ok]
    worse = [
        why.removeprefix("infeasible: ")
        for n, r in ratios.items()
        if (why := worse_beyond_noise(n, parts[n][0].metric, r, noise[n].value, direction, "noise"))
    ]
    worse += [why for m in setup.models if (why := _throughput_short(m, base, cand, floor))]
    weights = {m.name: m.weight for m in setup.models}
    value = fold_group(ratios, weights, mode) if len(ratios) == len(parts) else None
    return _confirmation(value, ratios, noise, gains, worse, len(base))


def _confirmation(
    value: float | None,
    ratios: Mapping[str, float],
    noise: Mapping[str, Noise],
    gains: Sequence[str],
    worse: Sequence[str],
    rounds: int,
) -> GroupConfirmation:
    bands = {n: v.value for n, v in noise.items()}
    if value is None:
        return GroupConfirmation(False, "no figure for every model: not confirmed", ratios, None, bands)
    ok = value < 1.0 and bool(gains) and not worse
    shown = ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
    source = ", ".join(f"{k} {v.text()}" for k, v in noise.items())
    why = (
        f"group objective {value:.3f} on the medians ({shown}); each model held against the noise of its "
        f"own {rounds}+{rounds} A B runs on the shared machine, not the one-engine floor alone ({source})"
        + (f"; gains: {'; '.join(gains)}" if gains else "; no model gains beyond its noise")
        + (f"; worse beyond the noise: {', '.join(worse)}" if worse else "")
        + ("" if ok else ": not confirmed")
    )
    return GroupConfirmation(ok, why, ratios, value, bands)


def confirm_group(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    baseline: optuna.trial.FrozenTrial,
    best: optuna.trial.FrozenTrial,
    *,
    rounds: int,
    min_improvement: float,
    first_number: int,
    on_run: Callable[[str, int, GroupTrialResult], None] | None = None,
    base_label: str = "baseline group",
) -> GroupConfirmation:
    """Re-measure ``best`` against ``baseline`` (module docstring); numbers from ``first_number``.
    ``baseline`` may be any group trial of the study (a night's incumbent, ``base_label``): its
    split and its own parameters are what run."""
    arms = ((base_label, baseline), (f"trial {best.number}", best))
    base, cand, failed = _ab_rounds(evaluate, arms, setup, rounds, first_number, on_run)
    if failed:
        return GroupConfirmation(False, f"a re-measurement failed ({failed}): not confirmed", {}, None)
    return _group_verdict(setup, evaluate.mode or "pareto", base, cand, min_improvement)
