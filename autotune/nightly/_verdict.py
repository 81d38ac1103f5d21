"""Tonight's figures and what they mean: each arm's runs, the noise band (from what was measured:
the runs, else the passes' spread, else earlier nights), and the regression verdict."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.study import TrialRecord
from autotune.trial import spread

__all__ = ["Band", "figure_of", "noise_band", "pooled_sd", "regression", "regression_against_baseline"]

Z_REGRESSION = 2.5  # standard errors of the difference of two medians before a move counts


@dataclass(frozen=True)
class Band:
    """The relative standard deviation of one run of a configuration, and where it came from."""

    value: float | None
    source: str

    def describe(self) -> str:
        if self.value is None:
            return f"noise band unknown ({self.source})"
        return f"noise band {self.value * 100:.2g}% ({self.source})"  # 0.02%, not 0.0%


def pooled_sd(groups: Sequence[Sequence[float]]) -> float | None:
    """The pooled relative standard deviation of groups of runs; None without two runs in one."""
    ss, df = 0.0, 0
    for vals in groups:
        if len(vals) >= 2:
            mean = statistics.mean(vals)
            if mean:
                ss += sum(((v - mean) / mean) ** 2 for v in vals)
                df += len(vals) - 1
    return math.sqrt(ss / df) if df else None


def figure_of(runs: Sequence[TrialRecord], metric: str) -> dict[str, Any] | None:
    """median, low, high and the runs' figures of ``metric`` over the runs that measured it."""
    vals = [v for v in (r.metric(metric) for r in runs if r.ok) if v is not None and math.isfinite(v)]
    if not vals:
        return None
    return {"median": statistics.median(vals), "low": min(vals), "high": max(vals), "runs": vals}


def noise_band(arms: Sequence[Sequence[TrialRecord]], metric: str, earlier: Sequence[float | None]) -> Band:
    """From the runs when an arm ran twice; else from the passes' spread on each started engine
    (the range of two passes over the square root of 2, taken as one run's standard deviation); else the earlier nights' bands. Never a made-up 0%."""
    per_arm = [[f["median"] for r in arm if (f := figure_of([r], metric))] for arm in arms]
    sd = pooled_sd(per_arm)
    if sd is not None:
        n = sum(len(a) for a in per_arm)
        return Band(sd, f"pooled over {n} runs tonight")
    spreads = [s for arm in arms for r in arm if (s := spread(r.pass_values(metric))) is not None]
    if spreads:
        return Band(
            statistics.median(spreads) / math.sqrt(2),
            f"one run an arm: the passes' spread on {len(spreads)} engine(s) tonight",
        )
    known = [b for b in earlier if b]
    if known:
        return Band(
            statistics.median(known[-5:]), f"one run, one pass: the last {len(known[-5:])} nights' bands"
        )
    if earlier:  # nights 2 and later whose nights never measured one
        return Band(
            None,
            f"one run of one pass, and none of the {len(earlier)} earlier night(s) measured a band: "
            "the minimum gain stands in",
        )
    return Band(None, "one run of one pass and no earlier night: the minimum gain stands in")


def regression(
    maximize: bool,
    tonight: dict[str, Any] | None,
    last: dict[str, Any] | None,
    floor: float,
    more_runs: Sequence[Sequence[float]] = (),
) -> tuple[bool, str]:
    """Is tonight's incumbent worse than its last figure beyond the noise?

    The noise is the runs' relative standard deviation, pooled within groups: tonight's runs of
    the incumbent, its last night's runs and ``more_runs`` (earlier nights' runs of the same
    command, tonight's baseline arm). Pooling within groups keeps a level shift out of the noise;
    pooling several groups (never the max of small ones) keeps the estimate steady. The threshold
    is 2.5 standard errors of the difference of the two figures (each a median of its runs), and
    never below ``floor``. Measured with a 5% run-to-run CV and 2 runs a night:
    benchmarks/nightly_alarms.py (0 of 10 false alarms, detections of a 20% slowdown).
    """
    if tonight is None:
        return True, "the incumbent produced no figures tonight (it no longer runs here)"
    if last is None:
        return False, "no earlier figure of this incumbent to compare with"
    runs_now = list(tonight.get("runs") or [tonight["median"]])
    runs_last = list(last.get("runs") or [last["median"]])
    sd = pooled_sd([runs_now, runs_last, *more_runs]) or 0.0
    return _judge(maximize, tonight["median"], last["median"], sd, [len(runs_now), len(runs_last)], floor, "")


def regression_against_baseline(
    maximize: bool,
    tonight: dict[str, Any],
    base_tonight: dict[str, Any],
    last: dict[str, Any],
    base_last: dict[str, Any],
    floor: float,
    more_runs: Sequence[Sequence[float]] = (),
) -> tuple[bool, str]:
    """The verdict across a workload change: tonight's traffic is not last night's, so the incumbent's
    figure is set against the baseline measured beside it, each night: a regression is the ratio
    incumbent / baseline moving beyond the noise (the traffic's own difficulty cancels). The
    standard error counts the four medians (incumbent and baseline, both nights)."""
    runs = [list(f.get("runs") or [f["median"]]) for f in (tonight, base_tonight, last, base_last)]
    sd = pooled_sd([*runs, *more_runs]) or 0.0
    now = tonight["median"] / base_tonight["median"]
    before = last["median"] / base_last["median"]
    return _judge(maximize, now, before, sd, [len(r) for r in runs], floor, " of the baseline's")


def _judge(
    maximize: bool, now: float, before: float, sd: float, counts: Sequence[int], floor: float, of: str
) -> tuple[bool, str]:
    threshold = max(floor, Z_REGRESSION * sd * math.sqrt(sum(1 / n for n in counts)))
    sign = -1.0 if maximize else 1.0
    change = sign * (now - before) / abs(before)
    moved = f"{change:.1%} worse" if change > 0 else f"{-change:.1%} better"
    if of:  # ratios: as multiples of the baseline's figure
        what = f"median {before:.3g}x -> {now:.3g}x{of} ({moved} than its last ratio)"
    else:
        what = f"median {before:.4g} -> {now:.4g} ({moved} than its last figure)"
    return change > threshold, (
        f"{what}, threshold {threshold:.1%} (2.5 standard errors of the measured noise, at least the minimum)"
    )
