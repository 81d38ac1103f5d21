"""The prefix reuse `workload inspect` predicts is the hit rate real vLLM's /metrics reports."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from autotune.bench import ArrivalSpec, MetricsDelta, ReplayTarget, replay, scrape_metrics
from autotune.engine import VLLM_METRICS, EngineProcess, LaunchSpec
from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
from autotune.space import RenderedConfig
from autotune.workload import inspect_workload, load_tokenizer, load_workload
from tests.conftest import MARK_ENV, REPO

pytestmark = pytest.mark.vllm

# Stated tolerance: the measured hit rate may fall short of the unlimited-cache upper bound by up
# to 8 points (two concurrent requests with a new shared prefix both miss before either is cached;
# preempted requests are re-queried) and may exceed it by at most 1 point (rounding).
BELOW, ABOVE = 0.08, 0.01


async def _replay_and_scrape(eng: EngineProcess, wl_path: Path) -> MetricsDelta:
    wl = load_workload(wl_path)
    async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
        before = await scrape_metrics(client, eng.base_url, VLLM_METRICS)
        target = ReplayTarget(base_url=eng.base_url, model=str(eng.spec.model))
        result = await replay(client, target, wl, ArrivalSpec(mode="timestamps", speed=4.0))
        after = await scrape_metrics(client, eng.base_url, VLLM_METRICS)
    assert all(t.ok for t in result.timings), [t.error for t in result.timings if not t.ok]
    assert before is not None and after is not None
    return MetricsDelta.between(before, after, names=VLLM_METRICS)


def test_multi_turn_hit_rate_matches_inspect_prediction(tmp_path: Path, tiny_model: Path, mark: str) -> None:
    wl_path = REPO / "examples" / "support_chat.jsonl"
    block = 64
    predicted = inspect_workload(
        load_workload(wl_path), block_size=block, tokenizer=load_tokenizer(tiny_model)
    ).prefix_reuse
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(
            [
                "--enforce-eager",
                "--max-model-len=4096",
                "--kv-cache-memory-bytes=128M",
                f"--block-size={block}",
            ]
        ),
        env={MARK_ENV: mark},
        startup_timeout_s=240,
    )
    with EngineProcess(spec, RenderedConfig(args=()), tmp_path / "vllm.log") as eng:
        eng.wait_healthy()
        delta = asyncio.run(_replay_and_scrape(eng, wl_path))
    measured = delta.prefix_hit_rate
    assert measured is not None
    print(f"prefix reuse predicted {predicted:.3f}, vLLM measured {measured:.3f}")
    assert predicted - BELOW <= measured <= predicted + ABOVE, (predicted, measured)
