"""Which trial to export, and what it costs: the study's best is exported on its figure only when
that figure can be trusted (issue 36, finding 6).

A measured trial's figure is doubtful when its replay fell behind its schedule (the server got
another load than planned), when it saturated the server (the figure is a queue), or when its
passes on the started engine spread more than its lead over the next trial (the ranking is inside
its own noise) and more than the noise floor. The best whose figure is doubtful is passed over for
the next trial whose figure is not, if that one still beats the baseline. Otherwise (every trial
ahead of the baseline doubtful) the best is kept and must be re-measured against the baseline (the
confirmation does) before its gain counts: passing over to vLLM's defaults would lose a real gain
unmeasured. A baseline that measured best is exported as it is.

The costs: every figure of the exported trial that got worse than the baseline's beyond the noise
(TPOT, ITL, E2EL, TTFT other than the objective, throughput), with the ratio, from the
confirmation's alternating runs when it ran (medians, ranges apart), else from the trials' figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna

from autotune.metrics import COSTS, METRICS, figure_text, maximized, shown_in
from autotune.study._baseline import baseline_trial
from autotune.study._best import completed_trials
from autotune.study._record import TrialRecord, constraints_hold, read_record

__all__ = ["COST_BAND", "COST_FIGURES", "ExportChoice", "PassedOver", "choose_export", "export_costs"]

# A figure counts as worse when it moved by more than this (or the floor, if larger): the restart
# noise of one configuration's TPOT, ITL and throughput is below it (benchmarks/RESULTS.md:
# repeatability), while the costs seen on the demo were 2.4x and 16x.
COST_BAND = 0.10
COST_FIGURES = shown_in(COSTS)


@dataclass(frozen=True)
class PassedOver:
    number: int
    value: float
    why: str


@dataclass(frozen=True)
class ExportChoice:
    """``trial``: the one to confirm and export (None: nothing measured); ``trusted``: its figure
    can be taken as measured (False: every candidate was doubtful; ``doubt`` says why)."""

    trial: optuna.trial.FrozenTrial | None
    passed_over: tuple[PassedOver, ...] = ()
    trusted: bool = True
    doubt: str | None = None

    def lines(
        self,
        metric: str,
        then: str = "so it is kept only if a re-measurement against the baseline confirms it",
    ) -> list[str]:
        """What the summary and the export's header say about the choice (empty: the best, trusted);
        ``then``: what becomes of a doubtful best kept (the re-measurement to come, or its verdict)."""
        out = [
            f"passed over trial {p.number} ({metric} {figure_text(p.value, metric)}): {p.why}"
            for p in self.passed_over
        ]
        if out and self.trial is not None:
            out[-1] += f"; exporting trial {self.trial.number} instead"
        if self.trial is not None and not self.trusted:
            out.append(
                f"trial {self.trial.number}'s {metric} is doubtful ({self.doubt}) and no trial beats the "
                f"baseline without doubt, {then}"
            )
        return out


def _doubts(rec: TrialRecord, metric: str, lead: float | None, floor: float) -> str | None:
    """Why this trial's figure alone cannot rank it (None: it can)."""
    f = rec.figures
    # a capacity counts only levels whose load the replayer delivered (bench.level_verdict): a lag
    # within that is not another load
    if f is not None and f.raw.get("behind_schedule") and metric != "capacity":
        return (
            f"its replay fell behind its schedule (lag p99 {float(f.raw.get('lag_p99_ms') or 0):.1f} ms, "
            f"allowed {float(f.raw.get('lag_tolerance_ms') or 0):.1f} ms), so it measured another load"
        )
    if rec.saturated:
        return "it saturated the server, so its figure is a queue"
    spread = rec.pass_spread(metric)
    if spread is None:
        return None
    half = spread / 2
    band = max(floor, lead if lead is not None else math.inf)
    if half <= band:
        return None
    return (
        f"its passes spread ±{half:.0%}, more than its {lead:.1%} lead over the next trial and the "
        f"{floor:.0%} noise floor, so the ranking is inside its own noise"
    )


def _ranked(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Measured feasible trials, best first (a reused measurement is its original's, counted once)."""
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0
    out = []
    for t in completed_trials(study):
        rec = read_record(t)
        if t.value is None or not rec.ok or not constraints_hold(rec.constraints or (1.0,)):
            continue
        if rec.duplicate_of is None:
            out.append(t)
    return sorted(out, key=lambda t: (sign * (t.value or 0.0), t.number))


def choose_export(study: optuna.Study, metric: str, *, floor: float = 0.03) -> ExportChoice:
    """The trial to export: the best whose figure can be trusted, passing over those before it."""
    ranked = _ranked(study)
    if not ranked:
        return ExportChoice(None)
    passed: list[PassedOver] = []
    first_doubt: str | None = None
    for i, t in enumerate(ranked):
        rec = read_record(t)
        if rec.baseline and not passed:  # the best is vLLM's defaults: exporting them changes nothing
            return ExportChoice(t)
        if rec.baseline:  # nothing beats the baseline without doubt: re-measure the best, lose no gain unseen
            break
        nxt = ranked[i + 1].value if i + 1 < len(ranked) else None
        value = t.value or 0.0
        lead = abs((nxt or 0.0) - value) / abs(value) if nxt is not None and value else None
        why = _doubts(rec, metric, lead, floor)
        if why is None:
            return ExportChoice(t, tuple(passed))
        first_doubt = first_doubt or why
        passed.append(PassedOver(t.number, value, why))
    return ExportChoice(ranked[0], (), trusted=False, doubt=first_doubt)


def _worse(name: str, ratio: float, band: float) -> bool:
    return ratio < 1 - band if maximized(name) else ratio > 1 + band


def _phrase(name: str, base: float, best: float) -> str:
    m = METRICS[name]
    return f"{m.label} {best / base:.2f}x ({base:.1f} -> {best:.1f} {m.unit})"


def costs_beyond_noise(
    base: Mapping[str, float],
    best: Mapping[str, float],
    objective: str,
    *,
    band: float = COST_BAND,
    apart: Mapping[str, bool] | None = None,
) -> list[str]:
    """A phrase for each figure (of ``COST_FIGURES``, not the objective) worse than the baseline's
    beyond ``band``; ``apart``: with repeated runs, whether the two arms' ranges do not overlap."""
    out = []
    for name in COST_FIGURES:
        a, b = base.get(name), best.get(name)
        if name == objective or a is None or b is None or not a > 0 or math.isnan(b):
            continue
        if _worse(name, b / a, band) and (apart is None or apart.get(name, True)):
            out.append(_phrase(name, a, b))
    return out


def _figures(rec: TrialRecord) -> dict[str, float]:
    f = rec.figures
    return {n: v for n in COST_FIGURES if f is not None and (v := f.get(n)) is not None}


def _apart(comparison: Mapping[str, object]) -> tuple[dict[str, float], dict[str, float], dict[str, bool]]:
    arms = [comparison.get(k) or {} for k in ("a", "b")]
    medians = [dict(arm.get("median") or {}) if isinstance(arm, Mapping) else {} for arm in arms]
    spreads = [dict(arm.get("spread") or {}) if isinstance(arm, Mapping) else {} for arm in arms]
    apart: dict[str, bool] = {}
    for name in COST_FIGURES:
        ra, rb = spreads[0].get(name), spreads[1].get(name)
        if isinstance(ra, Sequence) and isinstance(rb, Sequence) and len(ra) == 2 and len(rb) == 2:
            apart[name] = rb[0] > ra[1] or rb[1] < ra[0]
    clean = [{k: float(v) for k, v in m.items() if isinstance(v, int | float)} for m in medians]
    return clean[0], clean[1], apart


def export_costs(study: optuna.Study, trial: optuna.trial.FrozenTrial, objective: str) -> str | None:
    """One line: what got worse than the baseline beyond the noise, or that nothing did (None when
    there is no baseline to compare with, or the trial is the baseline)."""
    base = baseline_trial(study)
    if base is None or base.number == trial.number:
        return None
    confirmation = study.user_attrs.get(f"confirmation_{trial.number}")
    comparison = confirmation.get("comparison") if isinstance(confirmation, Mapping) else None
    if isinstance(comparison, Mapping):
        a, b, apart = _apart(comparison)
        source = "in the re-measurement"
        costs = costs_beyond_noise(a, b, objective, apart=apart)
    else:
        source = "in the study"
        costs = costs_beyond_noise(_figures(read_record(base)), _figures(read_record(trial)), objective)
    if not costs:
        return f"no figure got worse than the baseline's beyond the {COST_BAND:.0%} noise {source}"
    return (
        f"worse than the baseline beyond the {COST_BAND:.0%} noise {source} (trial {trial.number} over trial "
        f"{base.number}): {', '.join(costs)}"
    )
