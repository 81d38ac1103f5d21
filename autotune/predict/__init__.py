"""Predicted next to measured: a calibrated model of a configuration's latency (issue 48).

The cache replay (:func:`tier_hits`) says which prompt tokens each configuration's KV cache serves;
the engine's costs on this machine are fitted on measured replays (:func:`fit_costs`); the
workload's arrivals run through a step model of the scheduler at those costs (:func:`simulate`).
:class:`LatencyModel` ties them: ``fit(measured trials)``, ``predict(candidate) -> Prediction``
(TTFT p50/p90, TPOT p50, an interval from the :class:`Ledger` of its own measured errors). A
:class:`Calibration` file carries the costs and errors to ``autotune predict``.
"""

from __future__ import annotations

from autotune.predict._cache import tier_hits
from autotune.predict._calibration import VERSION, Calibration, this_machine
from autotune.predict._candidate import EngineDefaults, candidate_of, grid_of, kv_bytes_of
from autotune.predict._costs import EngineCosts, Replay, RequestTimes, fit_costs
from autotune.predict._kv import Chains, KvCache, TierHits, chains_of, replayed_hits
from autotune.predict._ledger import (
    DEFAULT_HALF_WIDTH,
    MIN_ERRORS,
    Interval,
    Ledger,
    LedgerEntry,
    LedgerSummary,
    interval_for,
)
from autotune.predict._model import Candidate, LatencyModel, MeasuredTrial, Prediction, WorkloadShape
from autotune.predict._shape import workload_shape
from autotune.predict._simulate import EngineLimits, Simulated, simulate

__all__ = [
    "DEFAULT_HALF_WIDTH",
    "MIN_ERRORS",
    "VERSION",
    "Calibration",
    "Candidate",
    "Chains",
    "EngineCosts",
    "EngineDefaults",
    "EngineLimits",
    "Interval",
    "KvCache",
    "LatencyModel",
    "Ledger",
    "LedgerEntry",
    "LedgerSummary",
    "MeasuredTrial",
    "Prediction",
    "Replay",
    "RequestTimes",
    "Simulated",
    "TierHits",
    "WorkloadShape",
    "candidate_of",
    "chains_of",
    "fit_costs",
    "grid_of",
    "interval_for",
    "kv_bytes_of",
    "replayed_hits",
    "simulate",
    "this_machine",
    "tier_hits",
    "workload_shape",
]
