"""The saturation detector (issue 36, finding 4): a queue that grows behind the arrivals is flagged
with its evidence and fix; healthy replays (real ones recorded on the CPU build and on an H200, and a
closed loop that holds its concurrency in flight by design) are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.bench import ArrivalSpec, RequestTiming, detect_saturation, saturation_of, summarize
from autotune.trial import read_request_timings

TIMINGS = Path(__file__).parents[2] / "data" / "timings"


def _passes(name: str, per_pass: int) -> list[dict[str, np.ndarray]]:
    """One trial's .requests.npz (every pass's requests, one after the other), split by pass."""
    a = read_request_timings(TIMINGS / name)
    n = len(a["sent"]) // per_pass
    return [{k: v[j * per_pass : (j + 1) * per_pass] for k, v in a.items()} for j in range(n)]


def test_the_demo_trial_that_keeps_up_is_not_saturated_in_any_pass() -> None:
    # examples/rag.jsonl at 3x its timestamps on the CPU build (2 cores, 4 agents' load), KV 128 MiB:
    # TTFT falls through each pass (the prefix cache fills)
    passes = _passes("demo-kv128m.requests.npz", 48)
    assert len(passes) == 5
    assert not any(saturation_of(p).saturated for p in passes)


def test_a_healthy_h200_replay_at_file_timestamps_is_not_saturated() -> None:
    (one,) = _passes("h200-chat-short.requests.npz", 128)
    verdict = saturation_of(one)
    assert not verdict.saturated
    assert verdict.offered_rps == pytest.approx(verdict.served_rps, rel=0.02)  # it kept up


def test_the_demo_baseline_whose_kv_pool_admits_few_requests_queues_and_is_flagged() -> None:
    # the demo's baseline (KV 20 MiB: 2,560 tokens) on the same host: TTFT 2.7 s -> 10-14 s through
    # each pass, 2.3-2.8 req/s served of 9 planned
    for p in _passes("demo-baseline-kv20m.requests.npz", 48):
        verdict = saturation_of(p)
        assert verdict.saturated
        note = verdict.note(speed=3.0)
        assert "TTFT p50 grew" in note and "arrivals planned at 9.01 req/s" in note
        served = verdict.served_rps or 0.0
        assert f"--rate {0.8 * served:.2g}" in note and "--speed " in note


def _timing(
    i: int, scheduled: float, ttft: float, *, lag: float = 0.0, slot_wait: float = 0.0
) -> RequestTiming:
    return RequestTiming(
        request_id=str(i), session=None, scheduled=scheduled, sent=scheduled + lag, ttft=ttft,
        latency=ttft + 0.05, itl=(0.01,) * 5, output_tokens=6, prompt_tokens=10, slot_wait=slot_wait,
    )  # fmt: skip


def test_a_closed_loop_holding_its_concurrency_is_not_saturated_however_long_its_requests_wait() -> None:
    # concurrency 8 on a server that serves 2 at once: every request queues ~4 service times, steadily
    rng = np.random.default_rng(0)
    timings = [_timing(i, i * 0.1, 0.4 * rng.uniform(0.7, 1.3)) for i in range(60)]
    figures = summarize(timings, 6.5, arrival=ArrivalSpec(mode="closed", concurrency=8))
    assert not figures.saturated and figures.saturation_note == ""


def test_an_open_loop_whose_ttft_grows_with_position_is_saturated_with_the_fix() -> None:
    timings = [_timing(i, i * 0.1, 0.05 + 0.08 * i) for i in range(40)]  # each waits for all before it
    figures = summarize(timings, 4.0, arrival=ArrivalSpec(mode="timestamps", speed=2.0))
    assert figures.saturated
    assert figures.saturation_note.startswith("saturated: the server could not keep up with the arrivals")
    assert "--speed " in figures.saturation_note and "shorter workload" in figures.saturation_note
    closed = summarize(timings, 4.0, arrival=ArrivalSpec(mode="closed", concurrency=4))
    assert closed.saturated and "a lower --concurrency" in closed.saturation_note


def test_requests_pinned_at_the_in_flight_limit_are_saturation_in_an_open_loop_only() -> None:
    # a flat TTFT, but a third of the requests waited for one of the replayer's slots
    timings = [
        _timing(i, i * 0.1, 0.2, lag=0.3 if i % 3 == 0 else 0.0, slot_wait=0.3 if i % 3 == 0 else 0.0)
        for i in range(30)
    ]
    assert saturation_of(timings).saturated
    assert "10 of 30 requests waited for an in-flight slot" in saturation_of(timings).note()
    assert not saturation_of(timings, closed_loop=True).saturated


def test_a_few_slow_requests_at_the_end_or_too_few_requests_are_not_saturation() -> None:
    flat = [_timing(i, i * 0.1, 0.1) for i in range(40)]
    tail = flat[:-4] + [_timing(i, i * 0.1, 3.0) for i in range(36, 40)]  # a late hiccup, not a trend
    assert not saturation_of(tail).saturated
    growing = [_timing(i, i * 0.1, 0.05 + 0.5 * i) for i in range(8)]
    assert not saturation_of(growing).saturated  # fewer than 9 measured requests: not judged
    assert not detect_saturation(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)).saturated
