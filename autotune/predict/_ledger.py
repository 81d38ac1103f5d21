"""The model's own measured error: every prediction set against its measurement, the interval the
next prediction carries, and the study's summary line.

An interval is the prediction scaled by the relative errors measured so far in this study
(``measured / predicted - 1`` of p90 TTFT): from their 5th to their 95th percentile, widened by
:data:`MARGIN` on each side and never narrower than :data:`MIN_HALF_WIDTH`. Before
:data:`MIN_ERRORS` errors are measured the interval is a stated default (:data:`DEFAULT_HALF_WIDTH`
each side) and a veto on it is not allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

__all__ = [
    "DEFAULT_HALF_WIDTH",
    "MIN_ERRORS",
    "Interval",
    "Ledger",
    "LedgerEntry",
    "LedgerSummary",
    "interval_for",
]

MIN_ERRORS = 3
DEFAULT_HALF_WIDTH = 0.5  # +-50% until the model's error is measured
MIN_HALF_WIDTH = 0.1
MARGIN = 0.05


@dataclass(frozen=True)
class Interval:
    """Where the measured p90 TTFT (ms) is expected; ``errors``: how many measured errors it is
    drawn from; ``veto_allowed``: enough of them for a prediction to stop a launch."""

    low: float
    high: float
    errors: int

    @property
    def veto_allowed(self) -> bool:
        return self.errors >= MIN_ERRORS

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def describe(self) -> str:
        if not self.veto_allowed:
            return (
                f"{self.low:.1f}-{self.high:.1f} ms (default +-{DEFAULT_HALF_WIDTH:.0%}: "
                f"{self.errors} of {MIN_ERRORS} errors measured, no veto yet)"
            )
        return f"{self.low:.1f}-{self.high:.1f} ms (from {self.errors} measured errors)"


def interval_for(value: float, errors: Sequence[float]) -> Interval:
    """The interval of a predicted ``value`` given the relative errors measured so far."""
    if len(errors) < MIN_ERRORS:
        return Interval(value * (1 - DEFAULT_HALF_WIDTH), value * (1 + DEFAULT_HALF_WIDTH), len(errors))
    e = np.asarray(errors, dtype=float)
    lo = min(float(np.percentile(e, 5)) - MARGIN, -MIN_HALF_WIDTH)
    hi = max(float(np.percentile(e, 95)) + MARGIN, MIN_HALF_WIDTH)
    return Interval(max(value * (1 + lo), 0.0), value * (1 + hi), len(errors))


@dataclass(frozen=True)
class LedgerEntry:
    label: str
    predicted_ms: float
    measured_ms: float
    interval: Interval

    @property
    def error(self) -> float:
        """Relative error of the prediction, ``measured / predicted - 1``."""
        return self.measured_ms / self.predicted_ms - 1 if self.predicted_ms > 0 else float("inf")

    @property
    def inside(self) -> bool:
        return self.interval.holds(self.measured_ms)


@dataclass(frozen=True)
class LedgerSummary:
    predictions: int
    mae_ms: float | None  # mean absolute error of p90 TTFT
    mape: float | None  # the same, relative to the measured figure
    inside: int
    within_20: int

    def line(self) -> str:
        if not self.predictions:
            return "ledger: no prediction measured yet"
        return (
            f"ledger: {self.predictions} predictions of p90 TTFT, mean absolute error {self.mae_ms:.1f} ms "
            f"({self.mape:.0%} of measured), {self.within_20} within 20%, "
            f"{self.inside} of {self.predictions} inside their intervals"
        )


@dataclass
class Ledger:
    """Predictions against measurements, in the order they were measured; ``carried``: relative
    errors measured earlier on the same machine, model and engine (a calibration file's)."""

    entries: list[LedgerEntry] = field(default_factory=list)
    carried: tuple[float, ...] = ()

    def add(self, prediction: _Predicted, measured_p90_ms: float, label: str = "") -> LedgerEntry:
        entry = LedgerEntry(label, prediction.ttft_p90_ms, measured_p90_ms, prediction.interval)
        self.entries.append(entry)
        return entry

    @property
    def errors(self) -> list[float]:
        return [*self.carried, *(e.error for e in self.entries if np.isfinite(e.error))]

    def summary(self) -> LedgerSummary:
        if not self.entries:
            return LedgerSummary(0, None, None, 0, 0)
        p = np.array([e.predicted_ms for e in self.entries])
        m = np.array([e.measured_ms for e in self.entries])
        absolute = np.abs(p - m)
        return LedgerSummary(
            predictions=len(self.entries),
            mae_ms=float(absolute.mean()),
            mape=float((absolute / np.maximum(m, 1e-9)).mean()),
            inside=sum(e.inside for e in self.entries),
            within_20=int((absolute <= 0.2 * m).sum()),
        )


class _Predicted(Protocol):
    """What the ledger reads of a prediction (:class:`autotune.predict.Prediction`)."""

    @property
    def ttft_p90_ms(self) -> float: ...

    @property
    def interval(self) -> Interval: ...
