"""Replay a workload over HTTP, time every request, read vLLM's /metrics, compute figures."""

from __future__ import annotations

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._figures import TrialFigures, failure_counts, meets_slos, summarize
from autotune.bench._probe import ServerFacts, probe_server, server_root
from autotune.bench._prometheus import MetricNames, MetricsDelta, parse_metrics, scrape_metrics
from autotune.bench._queue import QueueWatch, ServerQueue
from autotune.bench._replay import DEFAULT_MAX_IN_FLIGHT, ReplayResult, replay
from autotune.bench._request import ReplayTarget
from autotune.bench._saturation import detect_saturation, saturation_of
from autotune.bench._timing import RequestTiming, schedule_lag
from autotune.bench._transport import AiohttpTransport, ReplayClient, replay_client
from autotune.bench._warmup import warm_up

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "AiohttpTransport",
    "ArrivalSpec",
    "MetricNames",
    "MetricsDelta",
    "QueueWatch",
    "ReplayClient",
    "ReplayResult",
    "ReplayTarget",
    "RequestTiming",
    "ServerFacts",
    "ServerQueue",
    "TrialFigures",
    "detect_saturation",
    "failure_counts",
    "meets_slos",
    "parse_metrics",
    "plan_offsets",
    "probe_server",
    "replay",
    "replay_client",
    "saturation_of",
    "schedule_lag",
    "scrape_metrics",
    "server_root",
    "summarize",
    "warm_up",
]
