"""One night: re-measure what is deployed, search from what was good, promote only a proven gain.

1. Fingerprints of the environment and the workload, compared with the last night's.
2. The incumbent (``--incumbent``, else the last promoted config, else the baseline) and the
   baseline (vLLM's defaults, or the study's runnable reference), alternately, ``rounds`` times:
   tonight's noise band, and the regression verdict (the incumbent is slower than its last
   figure by more than that band, or no longer runs).
3. A warm-started search: the incumbent and the previous nights' top configurations first
   (measured again when a fingerprint changed), then new trials, until the budget leaves just
   enough time for step 4.
4. The best candidate of tonight against the incumbent, alternately; promoted only when it wins
   by more than the noise (disjoint ranges and a minimum gain) with every constraint held. The
   export is written atomically; the previous one is kept in ``history/``.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import shutil
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.export import export_best
from autotune.nightly._fingerprint import describe_changes, fingerprints
from autotune.nightly._history import NIGHT_ATTR, NightRecord, last_night, save_night
from autotune.space import RenderedConfig
from autotune.study import (
    REFERENCE_ATTR,
    PendingJournal,
    TrialRecord,
    TrialReport,
    constraints_hold,
    read_record,
    render_reference,
    run_study,
)
from autotune.trial import Comparison, VllmEvaluator, compare_configs, config_to_args, significant_gain
from autotune.tuning import TuningSetup

__all__ = ["NightOptions", "run_night"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NightOptions:
    budget_s: float
    out: Path
    rounds: int = 2
    min_improvement: float = 0.03
    incumbent: Path | None = None  # the deployed config (YAML); default: the last promoted one
    top_k: int = 3  # previous nights' best configurations re-tried first
    max_trials: int | None = None  # cap on new trials (tests); None: the budget decides


@dataclass
class _Clock:
    budget_s: float
    t0: float = field(default_factory=time.monotonic)
    run_costs: list[float] = field(default_factory=list)  # seconds per engine run tonight

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def per_run(self) -> float:
        return statistics.median(self.run_costs) if self.run_costs else 60.0

    def note(self, rec: TrialRecord) -> None:
        cost = sum(rec.timings_s.values())
        if cost > 0:
            self.run_costs.append(cost)


def _arm_config(args: Sequence[str], env: Mapping[str, str] | None = None) -> RenderedConfig:
    return RenderedConfig(args=tuple(args), env=dict(env or {}))


def _band(result: Comparison, metric: str) -> float:
    """Tonight's noise: the pooled relative standard deviation of each arm's runs (0 with one run each)."""
    return _pooled_sd([list(arm.figures.get(metric) or []) for arm in (result.a, result.b)])


def _pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    ss, df = 0.0, 0
    for vals in groups:
        if len(vals) >= 2:
            mean = statistics.mean(vals)
            if mean:
                ss += sum(((v - mean) / mean) ** 2 for v in vals)
                df += len(vals) - 1
    return math.sqrt(ss / df) if df else 0.0


def _summary(arm_name: str, result: Comparison, metric: str) -> dict[str, Any] | None:
    arm = result.a if result.a.name == arm_name else result.b
    vals = list(arm.figures.get(metric) or [])
    if not vals or not arm.measured:
        return None
    return {"median": statistics.median(vals), "low": min(vals), "high": max(vals), "runs": vals}


def _incumbent(
    setup: TuningSetup, study: optuna.Study, options: NightOptions, previous: NightRecord | None
) -> tuple[str, RenderedConfig, dict[str, Any] | None]:
    """(label, configuration, params when it came from this study)."""
    if options.incumbent is not None:
        _, args = config_to_args(options.incumbent)
        return f"incumbent {options.incumbent.name}", _arm_config(args), None
    if previous is not None and previous.incumbent_args is not None:
        return (
            "incumbent (last promoted)" if previous.incumbent_params else "incumbent (baseline)",
            _arm_config(previous.incumbent_args, previous.incumbent_env),
            (previous.incumbent_params),
        )
    return "incumbent (baseline)", _baseline_config(setup, study), {}


def _baseline_config(setup: TuningSetup, study: optuna.Study) -> RenderedConfig:
    return render_reference(setup.space, study.user_attrs.get(REFERENCE_ATTR))


Z_REGRESSION = 2.5  # standard errors of the difference of two medians before a move counts


def _regression(
    metric_max: bool, tonight: dict[str, Any] | None, last: dict[str, Any] | None, band: float, floor: float
) -> tuple[bool, str]:
    """Is tonight's incumbent worse than its last figure beyond the noise?

    The noise is the runs' relative standard deviation, pooled over tonight's arms and last night's
    runs of the incumbent; the threshold is 2.5 standard errors of the difference of the two
    figures (each a median of its runs), and never below ``floor``. Measured with a 5% run-to-run
    CV and 2 runs a night: 0 false alarms in 10 quiet nights (benchmarks/nightly_alarms.py).
    """
    if tonight is None:
        return True, "the incumbent produced no figures tonight (it no longer runs here)"
    if last is None:
        return False, "no earlier figure of this incumbent to compare with"
    runs_now, runs_last = (
        list(tonight.get("runs") or [tonight["median"]]),
        list(last.get("runs") or [last["median"]]),
    )
    sd = max(band, _pooled_sd([runs_now, runs_last]))
    threshold = max(floor, Z_REGRESSION * sd * math.sqrt(1 / len(runs_now) + 1 / len(runs_last)))
    sign = -1.0 if metric_max else 1.0
    change = sign * (tonight["median"] - last["median"]) / abs(last["median"])
    worse = change > threshold
    moved = f"{change:.1%} worse" if change > 0 else f"{-change:.1%} better"
    return worse, (
        f"median {last['median']:.4g} -> {tonight['median']:.4g} ({moved} than its last figure), "
        f"threshold {threshold:.1%} (2.5 standard errors of tonight's noise, at least the minimum)"
    )


def run_night(
    setup: TuningSetup,
    study: optuna.Study,
    sdir: Path,
    options: NightOptions,
    *,
    say: Callable[[str], None] = lambda line: None,
) -> NightRecord:
    clock = _Clock(options.budget_s)
    objective = setup.objective
    metric, maximize = objective.metric, objective.direction == "maximize"
    previous = last_night(study)
    number = (previous.number + 1) if previous else 1
    fp = fingerprints(setup)
    changes = describe_changes(previous.fingerprints if previous else None, fp)
    for line in changes:
        say(f"changed since night {previous.number if previous else '-'}: {line}")
    ndir = sdir / f"night-{number:04d}"
    evaluator: VllmEvaluator = setup.evaluator(ndir)

    # 2. the incumbent and the baseline, alternately
    inc_label, inc_config, inc_params = _incumbent(setup, study, options, previous)
    base_config = _baseline_config(setup, study)
    say(f"night {number}: re-measuring {inc_label} and the baseline, {options.rounds} round(s) each")

    def on_run(name: str, r: int, rec: TrialRecord) -> None:
        clock.note(rec)
        say(f"  {name} round {r + 1}: {rec.status.value} {metric}={rec.metric(metric)}")

    remeasure = compare_configs(
        evaluator,
        [("baseline", base_config), (inc_label, inc_config)],
        rounds=options.rounds,
        on_run=on_run,
        extra_figures=(metric,),
    )
    band = _band(remeasure, metric)
    inc_tonight = _summary(inc_label, remeasure, metric)
    base_tonight = _summary("baseline", remeasure, metric)
    same_incumbent = previous is not None and previous.incumbent_args == list(inc_config.args)
    last_fig = previous.incumbent_figure if previous and same_incumbent else None
    regression, why_regression = _regression(maximize, inc_tonight, last_fig, band, options.min_improvement)
    if previous is None:
        regression, why_regression = (inc_tonight is None), "first night: nothing to compare with"

    # 3. the warm-started search
    warm = list(previous.top_params if previous else [])
    if inc_params:
        warm.insert(0, inc_params)
    for params in [p for i, p in enumerate(warm) if p and p not in warm[:i]]:
        study.enqueue_trial(params, skip_if_exists=False)
    reserve = 2 * options.rounds * clock.per_run()

    def should_stop() -> bool:
        if repeats["n"] >= 5:
            log.info(
                "night %d: the sampler proposed measured configurations 5 times in a row: search ends", number
            )
            return True
        return clock.elapsed() + clock.per_run() + 2 * options.rounds * clock.per_run() > options.budget_s

    repeats = {"n": 0}  # a small space runs out: configurations the sampler proposes again

    def on_trial(rep: TrialReport) -> None:
        if rep.record.duplicate_of is None:
            clock.note(rep.record)
            repeats["n"] = 0
        else:
            repeats["n"] += 1
        say(f"  trial #{rep.number}: {rep.record.status.value} {metric}={rep.value}")

    searched = 0
    if clock.elapsed() + clock.per_run() + reserve <= options.budget_s:
        before = len(study.trials)
        prior = setup.apply_prior()
        for line in prior.lines if prior is not None else ():
            log.info(line)
        if prior is not None:
            prior.enqueue(study)
        run_study(
            study=study,
            space=setup.space,
            evaluator=evaluator,
            objective=objective,
            n_trials=options.max_trials,
            timeout_s=max(options.budget_s - reserve - clock.elapsed(), 1.0),
            on_trial_done=on_trial,
            reuse_duplicates=not changes,
            trial_attrs={NIGHT_ATTR: number},
            journal=PendingJournal(sdir),
            should_stop=should_stop,
            **setup.study_hooks(),
        )
        searched = len(study.trials) - before
    tonight = [
        t
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.user_attrs.get(NIGHT_ATTR) == number
    ]
    feasible = [
        t for t in tonight if read_record(t).ok and constraints_hold(read_record(t).constraints or (1.0,))
    ]
    sign = -1.0 if maximize else 1.0
    feasible.sort(key=lambda t: sign * (t.value or 0.0))
    top = [dict(t.params) for t in feasible[: options.top_k]]

    # 4. promote only a proven gain
    decision, reason, promoted = "kept", "", None
    candidate = next(
        (t for t in feasible if list(read_record(t).rendered_args) != list(inc_config.args)), None
    )
    if inc_tonight is None and candidate is None and base_tonight is None:
        decision, reason = (
            "nothing_feasible",
            "neither the incumbent, the baseline nor any trial ran feasibly",
        )
    elif candidate is None:
        reason = "no candidate other than the incumbent was feasible tonight"
    else:
        crec = read_record(candidate)
        cand_config = _arm_config(crec.rendered_args, crec.rendered_env)
        say(f"night {number}: trial #{candidate.number} against {inc_label}, {options.rounds} round(s) each")
        ab = compare_configs(
            evaluator,
            [(inc_label, inc_config), (f"trial {candidate.number}", cand_config)],
            rounds=options.rounds,
            on_run=on_run,
            extra_figures=(metric,),
        )
        ok, why = significant_gain(
            ab, metric, maximize=maximize, min_improvement=max(options.min_improvement, band)
        )
        if ok and any(not r.ok or (r.figures and r.figures.failed) for r in ab.b.runs):
            ok, why = False, why + "; but a re-measured run failed requests"
        if ok:
            promoted = candidate.number
            decision, reason = "promoted", why
            _promote(study, candidate, options.out, number)
            inc_config, inc_params = cand_config, dict(candidate.params)
            inc_tonight = _summary(f"trial {candidate.number}", ab, metric)
            inc_label = f"promoted trial #{candidate.number}"
        else:
            reason = why
    record = NightRecord(
        number=number,
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        fingerprints=fp,
        changes=changes,
        metric=metric,
        baseline_figure=base_tonight,
        incumbent_label=inc_label,
        incumbent_args=list(inc_config.args),
        incumbent_env=dict(inc_config.env),
        incumbent_params=inc_params,
        incumbent_figure=inc_tonight,
        noise_band=band,
        regression=regression,
        regression_reason=why_regression,
        decision=decision,
        reason=reason,
        promoted_trial=promoted,
        trials=searched,
        top_params=top,
        duration_s=clock.elapsed(),
        budget_s=options.budget_s,
        export=str(options.out) if promoted is not None else None,
    )
    save_night(study, record)
    return record


def _promote(study: optuna.Study, trial: optuna.trial.FrozenTrial, out: Path, night: int) -> None:
    """Keep the previous export in history/, then write the new one atomically."""
    out = Path(out)
    if out.exists():
        history = out.parent / "history"
        history.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        shutil.copy2(out, history / f"{out.stem}.{stamp}.night{night - 1}{out.suffix}")
    export_best(study, out=out, trial=trial)
