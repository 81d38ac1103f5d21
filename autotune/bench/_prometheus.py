"""An engine's ``/metrics`` (its sample names from the engine, :class:`MetricNames`): scrape, and the change over a run (prefix-cache hits, offload, preemptions)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "MetricNames",
    "MetricsDelta",
    "MetricsSnapshot",
    "parse_metrics",
    "scrape_metrics",
]

DEFAULT_HOST_SOURCES = ("host",)


@dataclass(frozen=True)
class MetricNames:
    """Where an engine's ``/metrics`` keeps each figure the tool reads (sample names).

    An engine (``autotune.engine``) provides its own (vLLM's: ``autotune.engine.VLLM_METRICS``).
    Cached prompt tokens by where they came from: vLLM >= 0.3x exports
    ``prompt_tokens_cached_by_source`` (device|host|p2p|disk|external_unspecified) and also
    ``prompt_tokens_by_source``; vLLM 0.26 only the latter (local_compute|local_cache_hit|
    external_kv_transfer: a CPU-offload hit is an external transfer). The first family is used
    when present, so no token is counted twice.
    """

    prefix: str
    cached_by_source: str
    prompt_by_source: str
    prefix_cache_queries: str
    prefix_cache_hits: str
    external_prefix_cache_queries: str
    external_prefix_cache_hits: str
    prompt_tokens: str
    preemptions: str
    offload_load_bytes: str
    offload_store_bytes: str
    ttft_count: str
    ttft_sum: str
    kv_cache_usage: str
    device_source: str = "device"
    legacy_device_source: str = "local_cache_hit"
    legacy_host_source: str = "external_kv_transfer"


@dataclass(frozen=True)
class MetricsSnapshot:
    """Sample values summed over label sets, keyed by sample name; ``by_source`` for cached tokens."""

    values: Mapping[str, float]
    cached_by_source: Mapping[str, float]  # vLLM >= 0.3x: device|host|...
    prompt_by_source: Mapping[str, float] = field(
        default_factory=dict
    )  # local_cache_hit|external_kv_transfer

    def get(self, name: str) -> float:
        return float(self.values.get(name, 0.0))


def parse_metrics(text: str, names: MetricNames) -> MetricsSnapshot:
    values: dict[str, float] = defaultdict(float)
    by_source: dict[str, float] = defaultdict(float)
    prompt_source: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(names.prefix) or s.name.endswith("_created"):
                continue
            if "le" in s.labels or "quantile" in s.labels:
                continue  # histogram buckets: only _sum and _count are kept
            if family.type == "gauge":  # a level, not a count: several engines report the highest
                values[s.name] = max(values.get(s.name, s.value), s.value)
            else:
                values[s.name] += s.value
            if s.name == names.cached_by_source:
                by_source[s.labels.get("source", "")] += s.value
            elif s.name == names.prompt_by_source:
                prompt_source[s.labels.get("source", "")] += s.value
    return MetricsSnapshot(
        values=dict(values), cached_by_source=dict(by_source), prompt_by_source=dict(prompt_source)
    )


async def scrape_metrics(
    client: httpx.AsyncClient, base_url: str, names: MetricNames, path: str = "/metrics"
) -> MetricsSnapshot | None:
    try:
        resp = await client.get(base_url + path, timeout=10.0)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    return parse_metrics(resp.text, names)


@dataclass(frozen=True)
class MetricsDelta:
    """What vLLM counted during the measured run (after minus before)."""

    prefix_cache_queries: float
    prefix_cache_hits: float
    external_prefix_cache_queries: float
    external_prefix_cache_hits: float
    host_cached_tokens: float  # prompt tokens served from the CPU offload pool
    device_cached_tokens: float
    prompt_tokens: float
    preemptions: float
    offload_load_bytes: float
    offload_store_bytes: float
    server_ttft_mean_ms: float | None
    kv_cache_usage_end: float | None

    @property
    def prefix_hit_rate(self) -> float | None:
        """GPU (device) prefix-cache hit rate: hit tokens / queried tokens."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else None

    @property
    def host_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the CPU (host) offload pool."""
        return self.host_cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def as_dict(self) -> dict[str, float | None]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["prefix_hit_rate"] = self.prefix_hit_rate
        d["host_hit_rate"] = self.host_hit_rate
        return d

    @staticmethod
    def between(
        before: MetricsSnapshot,
        after: MetricsSnapshot,
        host_sources: tuple[str, ...] = DEFAULT_HOST_SOURCES,
        *,
        names: MetricNames,
    ) -> MetricsDelta:
        """``host_sources``: the ``cached_by_source`` labels of the engine profile's CPU pool hits."""
        n = names

        def d(name: str) -> float:
            return after.get(name) - before.get(name)

        ttft_n = d(n.ttft_count)
        ttft_sum = d(n.ttft_sum)
        usage = after.values.get(n.kv_cache_usage)
        return MetricsDelta(
            prefix_cache_queries=d(n.prefix_cache_queries),
            prefix_cache_hits=d(n.prefix_cache_hits),
            external_prefix_cache_queries=d(n.external_prefix_cache_queries),
            external_prefix_cache_hits=d(n.external_prefix_cache_hits),
            host_cached_tokens=_cached(after, host_sources, n.legacy_host_source)
            - _cached(before, host_sources, n.legacy_host_source),
            device_cached_tokens=_cached(after, (n.device_source,), n.legacy_device_source)
            - _cached(before, (n.device_source,), n.legacy_device_source),
            prompt_tokens=d(n.prompt_tokens),
            preemptions=d(n.preemptions),
            offload_load_bytes=d(n.offload_load_bytes),
            offload_store_bytes=d(n.offload_store_bytes),
            server_ttft_mean_ms=(ttft_sum / ttft_n * 1000.0) if ttft_n else None,
            kv_cache_usage_end=float(usage) if usage is not None else None,
        )


def _cached(snap: MetricsSnapshot, sources: tuple[str, ...], fallback: str) -> float:
    if snap.cached_by_source:
        return sum(snap.cached_by_source.get(n, 0.0) for n in sources)
    return snap.prompt_by_source.get(fallback, 0.0)
