"""Replay a workload over HTTP, time every request, read vLLM's /metrics, compute figures."""

from __future__ import annotations

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._figures import PERCENTILES, TrialFigures, meets_slos, summarize
from autotune.bench._prometheus import MetricsDelta, MetricsSnapshot, parse_metrics, scrape_metrics
from autotune.bench._replay import ReplayResult, ReplayTarget, replay, warm_up
from autotune.bench._timing import RequestTiming

__all__ = [
    "PERCENTILES",
    "ArrivalSpec",
    "MetricsDelta",
    "MetricsSnapshot",
    "ReplayResult",
    "ReplayTarget",
    "RequestTiming",
    "TrialFigures",
    "meets_slos",
    "parse_metrics",
    "plan_offsets",
    "replay",
    "scrape_metrics",
    "summarize",
    "warm_up",
]
