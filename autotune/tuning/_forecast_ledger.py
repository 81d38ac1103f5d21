"""What a study's latency model said and how it fared (``--predict``): a prediction as stored on its
trial, and the study's ledger, vetoes and audits in the run's summary (:func:`forecast_summary`),
read from the trials alone."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.predict import Interval, Ledger
from autotune.study import FORECAST_ATTR, read_record

__all__ = ["STOPPED_ATTR", "StoredForecast", "forecast_summary"]

STOPPED_ATTR = "forecast_veto_stopped"  # study attr: why the model vetoes no more


@dataclass(frozen=True)
class StoredForecast:
    """A prediction as stored on a trial, as the ledger reads it."""

    fc: Mapping[str, Any]

    @property
    def ttft_p90_ms(self) -> float:
        return float(self.fc["ttft_p90_ms"])

    @property
    def interval(self) -> Interval:
        lo, hi = self.fc.get("p90_interval_ms") or self.fc["interval_ms"]
        return Interval(float(lo), float(hi), int(self.fc.get("interval_errors", 0)))


def forecast_summary(study: optuna.Study) -> list[str]:
    """The study's ledger and its vetoes, one line each (empty when nothing was predicted): the
    mean absolute error of p90 TTFT over the started trials, how many fell inside their intervals,
    the starts the veto saved, each audit and whether the veto would have been right."""
    trials = study.get_trials(deepcopy=False)
    launched, vetoed, audits = [], [], []
    for t in trials:
        fc = t.user_attrs.get(FORECAST_ATTR)
        if not fc:
            continue
        rec = read_record(t)
        if fc.get("verdict") == "veto":
            vetoed.append(t.number)
            continue
        measured = rec.metric("ttft_p90") if rec.ok and rec.duplicate_of is None else None
        if measured is not None:
            launched.append((float(fc["ttft_p90_ms"]), measured, StoredForecast(fc).interval))
        if fc.get("verdict") == "audit":
            audits.append((t.number, fc, rec.metric(fc.get("metric") or "ttft_p90") if rec.ok else None))
    if not launched and not vetoed:
        return []
    ledger = Ledger()
    for predicted, measured, interval in launched:
        ledger.add(_Fixed(predicted, interval), measured)
    lines = [ledger.summary().line()]
    lines.append(
        f"veto: {len(vetoed)} candidate(s) predicted worse were not started"
        + (f" (trials {', '.join(map(str, vetoed))})" if vetoed else "")
    )
    for number, fc, measured in audits:
        if measured is None:
            lines.append(f"audit: trial {number} (predicted worse) was started and measured nothing")
            continue
        right = measured > fc.get("best_ms", math.inf)
        lines.append(
            f"audit: trial {number} was predicted {fc['predicted_ms']:.1f} ms, worse than trial "
            f"{fc.get('best_trial')}'s {fc.get('best_ms', math.nan):.1f} ms; measured {measured:.1f} ms: "
            f"the veto would have been {'right' if right else 'wrong'}"
        )
    if not audits:
        lines.append(
            "audit: no candidate was predicted worse than the best beyond its interval, so none was audited"
            if not vetoed
            else "audit: none started (the first candidate predicted worse is started as the audit)"
        )
    stopped = study.user_attrs.get(STOPPED_ATTR)
    if stopped:
        lines.append(f"veto stopped: {stopped}")
    return lines


@dataclass(frozen=True)
class _Fixed:
    ttft_p90_ms: float
    interval: Any
