"""CPU-offload hits under vLLM 0.26's metric names, and gauges across engines."""

from __future__ import annotations

from autotune.bench import MetricsDelta, parse_metrics
from autotune.engine import VLLM_METRICS

BEFORE = """\
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 100.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 50.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 0.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 150.0
"""
AFTER = """\
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 300.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 450.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 400.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1150.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.75
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
"""


def test_external_kv_transfer_counts_as_host_offload_hits() -> None:
    delta = MetricsDelta.between(
        parse_metrics(BEFORE, VLLM_METRICS), parse_metrics(AFTER, VLLM_METRICS), names=VLLM_METRICS
    )
    assert delta.host_cached_tokens == 400.0
    assert delta.device_cached_tokens == 400.0
    assert delta.host_hit_rate == 0.4  # 400 of the run's 1000 prompt tokens came from host memory


def test_a_gauge_is_the_highest_engine_not_the_sum() -> None:
    assert parse_metrics(AFTER, VLLM_METRICS).values["vllm:kv_cache_usage_perc"] == 0.75


BOTH_FAMILIES = """\
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 1152.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 300.0
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 1152.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 300.0
"""


def test_recent_vllm_exports_both_families_and_no_token_counts_twice() -> None:
    delta = MetricsDelta.between(
        parse_metrics("", VLLM_METRICS), parse_metrics(BOTH_FAMILIES, VLLM_METRICS), names=VLLM_METRICS
    )
    assert delta.device_cached_tokens == 1152.0
    assert delta.host_cached_tokens == 300.0
