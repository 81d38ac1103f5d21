"""/metrics as vLLM serves it: the text is produced by prometheus_client, the library vLLM uses."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from autotune.bench import MetricsDelta, parse_metrics, scrape_metrics
from autotune.engine import VLLM_METRICS

LABELS = ["model_name", "engine"]


class FakeVllmMetrics:
    """The subset of vLLM's metrics that the delta reads, with vLLM's names and labels."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.queries = Counter("vllm:prefix_cache_queries", "queried tokens", LABELS, registry=r)
        self.hits = Counter("vllm:prefix_cache_hits", "hit tokens", LABELS, registry=r)
        self.ext_queries = Counter("vllm:external_prefix_cache_queries", "q", LABELS, registry=r)
        self.ext_hits = Counter("vllm:external_prefix_cache_hits", "h", LABELS, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "prompt tokens", LABELS, registry=r)
        self.cached = Counter(
            "vllm:prompt_tokens_cached_by_source", "cached", [*LABELS, "source"], registry=r
        )
        self.preemptions = Counter("vllm:num_preemptions", "preemptions", LABELS, registry=r)
        self.load_bytes = Counter("vllm:kv_offload_load_bytes", "b", LABELS, registry=r)
        self.usage = Gauge("vllm:kv_cache_usage_perc", "usage", LABELS, registry=r)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "ttft", LABELS, buckets=[0.01, 0.1, 1.0], registry=r
        )
        self.other = Counter("process_cpu_seconds", "not vLLM's", registry=r)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def _run(m: FakeVllmMetrics, *, queries: int, hits: int, host: int, device: int, ttfts: list[float]) -> None:
    labels = ("tiny", "0")
    m.queries.labels(*labels).inc(queries)
    m.hits.labels(*labels).inc(hits)
    m.prompt.labels(*labels).inc(queries)
    m.cached.labels(*labels, "host").inc(host)
    m.cached.labels(*labels, "device").inc(device)
    for v in ttfts:
        m.ttft.labels(*labels).observe(v)


def test_snapshot_reads_counters_by_their_total_name_and_skips_created_and_buckets() -> None:
    m = FakeVllmMetrics()
    _run(m, queries=1000, hits=250, host=40, device=210, ttfts=[0.05, 0.15])
    m.usage.labels("tiny", "0").set(0.4)
    m.other.inc(3)
    text = m.text()
    assert "vllm:prefix_cache_queries_created" in text  # present in the text, ignored by the parser

    snap = parse_metrics(text, VLLM_METRICS)
    assert snap.get("vllm:prefix_cache_queries_total") == 1000
    assert snap.get("vllm:prefix_cache_hits_total") == 250
    assert snap.get("vllm:time_to_first_token_seconds_count") == 2
    assert snap.get("vllm:time_to_first_token_seconds_sum") == pytest.approx(0.2)
    assert snap.get("vllm:kv_cache_usage_perc") == pytest.approx(0.4)
    assert snap.cached_by_source == {"host": 40, "device": 210}
    assert not any(k.endswith("_created") or k.endswith("_bucket") for k in snap.values)
    assert not any(not k.startswith("vllm:") for k in snap.values)


def test_delta_over_a_run_reports_hit_rates_and_server_ttft() -> None:
    m = FakeVllmMetrics()
    _run(m, queries=500, hits=100, host=0, device=100, ttfts=[1.0])  # warm-up, before the run
    before = parse_metrics(m.text(), VLLM_METRICS)
    _run(m, queries=1000, hits=600, host=200, device=400, ttfts=[0.1, 0.3])
    m.preemptions.labels("tiny", "0").inc(3)
    m.load_bytes.labels("tiny", "0").inc(4096)
    m.usage.labels("tiny", "0").set(0.75)
    after = parse_metrics(m.text(), VLLM_METRICS)

    d = MetricsDelta.between(before, after, names=VLLM_METRICS)
    assert d.prefix_cache_queries == 1000
    assert d.prefix_cache_hits == 600
    assert d.prefix_hit_rate == pytest.approx(0.6)
    assert d.host_cached_tokens == 200
    assert d.device_cached_tokens == 400
    assert d.host_hit_rate == pytest.approx(0.2)
    assert d.preemptions == 3
    assert d.offload_load_bytes == 4096
    assert d.server_ttft_mean_ms == pytest.approx(200.0)
    assert d.kv_cache_usage_end == pytest.approx(0.75)
    assert d.as_dict()["prefix_hit_rate"] == pytest.approx(0.6)


def test_delta_with_no_traffic_has_no_rates() -> None:
    snap = parse_metrics(FakeVllmMetrics().text(), VLLM_METRICS)
    d = MetricsDelta.between(snap, snap, names=VLLM_METRICS)
    assert d.prefix_hit_rate is None
    assert d.host_hit_rate is None
    assert d.server_ttft_mean_ms is None


def test_hand_written_vllm_text_with_two_engines_sums_label_sets() -> None:
    text = """\
# HELP vllm:prompt_tokens_cached_by_source_total Cached prompt tokens by source.
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 30.0
vllm:prompt_tokens_cached_by_source_total{engine="1",model_name="m",source="host"} 12.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 7.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 40.0
"""
    snap = parse_metrics(text, VLLM_METRICS)
    assert snap.cached_by_source == {"host": 42.0, "device": 7.0}
    assert snap.get("vllm:prompt_tokens_total") == 140.0


def test_scrape_reads_metrics_over_http_and_gives_none_when_unavailable() -> None:
    m = FakeVllmMetrics()
    _run(m, queries=10, hits=5, host=0, device=5, ttfts=[])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=m.text())
        return httpx.Response(404)

    async def scrape(url: str) -> object:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await scrape_metrics(client, url, VLLM_METRICS)

    snap = asyncio.run(scrape("http://127.0.0.1:8000"))
    assert snap is not None and snap.get("vllm:prefix_cache_hits_total") == 5  # type: ignore[attr-defined]
    assert asyncio.run(scrape("http://127.0.0.1:8000/nothing-here")) is None

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def scrape_down() -> object:
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
            return await scrape_metrics(client, "http://127.0.0.1:1", VLLM_METRICS)

    assert asyncio.run(scrape_down()) is None
