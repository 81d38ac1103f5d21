"""Before exporting, re-measure the best trial against the baseline and keep it only if it wins
by more than the noise (a study's best is partly the luckiest measurement)."""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.space import EngineConfig
from autotune.study import COST_FIGURES, Objective, TrialRecord, baseline_trial, best_feasible, read_record
from autotune.trial import ArmSummary, Comparison, VllmEvaluator, compare_configs, significant_gain
from autotune.tuning._gpus import DEVICES_PREFIX

__all__ = ["ArmVerdict", "Noise", "confirm_best", "judge_gain", "on_shared_gpu", "run_noise"]

log = logging.getLogger(__name__)


def _config(rec: TrialRecord) -> EngineConfig:
    return EngineConfig.recorded(rec.rendered_args, rec.rendered_env)


def _above_the_base_bracket(result: Any, why: str) -> tuple[bool, str]:
    """Capacity is measured in levels, so two runs of one configuration often read the same level and
    'ranges apart' says little: the best must hold, in every run, a load at which the baseline broke
    in every run (its lowest capacity at least the baseline's highest bracket top)."""
    held = [float(r.figures.get("capacity") or 0.0) for r in result.b.runs if r.ok and r.figures]
    tops = [r.figures.get("capacity_hi") for r in result.a.runs if r.ok and r.figures]
    if not held or not tops:
        return False, why + "; no bracket measured for both"
    top = math.inf if any(t is None for t in tops) else max(float(t) for t in tops)
    if min(held) >= top:
        return True, why + f", every run held a load at which the baseline broke ({top:.3g} req/s)"
    return False, why + (
        f"; but a run of it held only {min(held):.3g} req/s, not above the baseline's bracket "
        f"({'no baseline run broke' if math.isinf(top) else f'its runs broke at up to {top:.3g} req/s'}): "
        "the two lie within the bracket's resolution"
    )


def _on_schedule(result: Comparison) -> Comparison:
    """The comparison of the runs that kept to their schedule (a late run's figures left out)."""

    def arm(a: ArmSummary) -> ArmSummary:
        keep = [
            i
            for i, r in enumerate(a.runs)
            if not (r.ok and r.figures and r.figures.raw.get("behind_schedule"))
        ]
        ok_runs = [r for r in a.runs if r.ok]  # figures hold one value per measured run, in order
        index = {id(r): k for k, r in enumerate(ok_runs)}
        kept_ok = [index[id(a.runs[i])] for i in keep if id(a.runs[i]) in index]
        figures = {
            name: [values[k] for k in kept_ok if k < len(values)] for name, values in a.figures.items()
        }
        return dataclasses.replace(a, runs=tuple(a.runs[i] for i in keep), figures=figures)

    return Comparison(a=arm(result.a), b=arm(result.b))


@dataclass(frozen=True)
class Noise:
    """The noise a re-measured figure is held against: the floor (``min_improvement``), or the spread
    its own A B A B runs showed where that is larger (``spread``: the larger arm's max-min over its
    median; None: fewer than two runs an arm, nothing measured)."""

    value: float
    floor: float
    spread: float | None = None

    @property
    def measured(self) -> bool:
        return self.spread is not None and self.spread > self.floor

    def text(self) -> str:
        return f"{self.value:.0%} spread" if self.measured else f"{self.floor:.0%} floor"


def _spread(values: Sequence[float]) -> float | None:
    mid = statistics.median(values) if len(values) >= 2 else 0.0
    return (max(values) - min(values)) / mid if mid > 0 else None


def run_noise(a: Sequence[float], b: Sequence[float], floor: float) -> Noise:
    """The noise of a figure measured A B A B: the larger of the floor and either arm's spread."""
    spreads = [s for s in (_spread(a), _spread(b)) if s is not None]
    spread = max(spreads) if spreads else None
    return Noise(max(floor, spread or 0.0), floor, spread)


@dataclass(frozen=True)
class ArmVerdict:
    """Whether arm B of a comparison beats arm A on one figure beyond the noise, and why."""

    ok: bool
    why: str
    inconclusive: bool = False
    late: int = 0  # runs whose replay fell behind its schedule (their figures unreliable)


def judge_gain(
    result: Comparison, metric: str, *, maximize: bool, noise: float, capacity: bool
) -> ArmVerdict:
    """B against A on ``metric`` (:func:`~autotune.trial.significant_gain` with ``noise`` as the
    floor); a capacity only above the baseline's bracket; a gain read off late runs only if the runs
    on schedule alone show it (else inconclusive)."""
    ok, why = significant_gain(result, metric, maximize=maximize, min_improvement=noise)
    if ok and capacity:
        ok, why = _above_the_base_bracket(result, why)
    late = [
        r
        for arm in (result.a, result.b)
        for r in arm.runs
        if r.ok and r.figures and r.figures.raw.get("behind_schedule")
    ]
    # a capacity run's figure counts only levels whose load was delivered (bench.level_verdict)
    if not (late and ok and not capacity):
        return ArmVerdict(ok, why, False, len(late))
    # a gain read off runs whose load was not the planned one is not evidence: the verdict must
    # stand on the runs that kept to their schedule alone
    kept = _on_schedule(result)
    still = (
        kept.a.runs and kept.b.runs
        and significant_gain(kept, metric, maximize=maximize, min_improvement=noise)[0]
    )  # fmt: skip
    if still:
        return ArmVerdict(
            True,
            why + f"; {len(late)} run(s) behind their schedule left out, the gain holds on the others",
            False,
            len(late),
        )
    return ArmVerdict(
        False,
        why + f"; inconclusive: {len(late)} of {len(result.a.runs) + len(result.b.runs)} runs fell behind "
        "their schedule, so their figures are unreliable, and the runs on schedule alone do not show "
        "the gain (fix: a lower --speed or --rate, a quieter host, or more --confirm-rounds)",
        True,
        len(late),
    )


def on_shared_gpu(study: optuna.Study) -> bool:
    """Whether a worker of ``study`` found another tenant's memory on its GPU (:func:`record_devices`)."""
    return any(
        isinstance(v, Mapping) and v.get("note")
        for k, v in study.user_attrs.items()
        if k.startswith(DEVICES_PREFIX)
    )


def confirm_best(
    study: optuna.Study,
    evaluator: VllmEvaluator,
    objective: Objective,
    *,
    rounds: int,
    min_improvement: float,
    log_dir: Path,
    on_run: Callable[[str, int, TrialRecord], None] | None = None,
    candidate: optuna.trial.FrozenTrial | None = None,
    shared: bool | None = None,
) -> tuple[optuna.trial.FrozenTrial | None, dict[str, Any] | None]:
    """The trial to export and the confirmation record (None when nothing needed confirming).
    ``candidate``: the trial to confirm (default: the best feasible; see ``study.choose_export``).
    ``shared``: the engine shares its GPU with another tenant, whose load moves its figures (None: as
    the study's workers recorded their GPUs, :func:`on_shared_gpu`): the noise is then the spread its
    own A B A B runs show where that passes ``min_improvement``, and the record's ``why`` says so."""
    best = candidate or best_feasible(study)
    base = baseline_trial(study)
    if best is None or base is None or best.number == base.number or rounds < 1:
        return best, None
    runner = dataclasses.replace(evaluator, log_dir=log_dir, arg_checker=None)
    result = compare_configs(
        runner,
        [("baseline", _config(read_record(base))), (f"trial {best.number}", _config(read_record(best)))],
        rounds=rounds,
        # the objective and every figure whose cost the summary names (study.export_costs)
        extra_figures=tuple(dict.fromkeys(f for f in (objective.metric, *COST_FIGURES) if f != "goodput")),
        on_run=on_run,
    )
    noise = Noise(min_improvement, min_improvement)
    shared = on_shared_gpu(study) if shared is None else shared
    if shared:
        metric = objective.metric
        noise = run_noise(
            result.a.figures.get(metric) or [], result.b.figures.get(metric) or [], min_improvement
        )
    verdict = judge_gain(
        result, objective.metric, maximize=objective.direction == "maximize", noise=noise.value,
        capacity=objective.is_capacity,
    )  # fmt: skip
    why = verdict.why + (
        f"; the noise is the {noise.text()} of its own runs on a shared GPU" if shared else ""
    )
    record = {
        "trial": best.number,
        "confirmed": verdict.ok,
        "inconclusive": verdict.inconclusive,
        "late_runs": verdict.late,  # runs whose replay fell behind its schedule (their figures unreliable)
        "runs": len(result.a.runs) + len(result.b.runs),
        "why": why,
        "comparison": result.as_dict(),
    }
    study.set_user_attr(f"confirmation_{best.number}", record)
    log.info("confirmation of trial %d against the baseline: %s", best.number, why)
    return (best if verdict.ok else base), record
