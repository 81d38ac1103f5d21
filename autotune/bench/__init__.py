"""Replay a workload over HTTP, time every request, read vLLM's /metrics, compute figures."""

from __future__ import annotations

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._figures import PERCENTILES, TrialFigures, failure_counts, meets_slos, summarize
from autotune.bench._probe import (
    PROXY_VARIABLES,
    ServerFacts,
    probe_server,
    proxy_variables,
    server_root,
)
from autotune.bench._prometheus import (
    VLLM_METRICS,
    MetricNames,
    MetricsDelta,
    MetricsSnapshot,
    parse_metrics,
    scrape_metrics,
)
from autotune.bench._replay import DEFAULT_MAX_IN_FLIGHT, ReplayResult, replay
from autotune.bench._request import ReplayTarget
from autotune.bench._saturation import Saturation, detect_saturation, saturation_of
from autotune.bench._timing import RequestTiming, ScheduleLag, schedule_lag
from autotune.bench._transport import AiohttpTransport, ReplayClient, StreamedAnswer, replay_client
from autotune.bench._warmup import warm_up

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "PERCENTILES",
    "PROXY_VARIABLES",
    "VLLM_METRICS",
    "AiohttpTransport",
    "ArrivalSpec",
    "MetricNames",
    "MetricsDelta",
    "MetricsSnapshot",
    "ReplayClient",
    "ReplayResult",
    "ReplayTarget",
    "RequestTiming",
    "Saturation",
    "ScheduleLag",
    "ServerFacts",
    "StreamedAnswer",
    "TrialFigures",
    "detect_saturation",
    "failure_counts",
    "meets_slos",
    "parse_metrics",
    "plan_offsets",
    "probe_server",
    "proxy_variables",
    "replay",
    "replay_client",
    "saturation_of",
    "schedule_lag",
    "scrape_metrics",
    "server_root",
    "summarize",
    "warm_up",
]
