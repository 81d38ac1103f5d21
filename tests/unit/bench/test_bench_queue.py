"""vLLM's own queue (``vllm:num_requests_waiting``) tells a late replayer from a server that cannot
keep up (issue 45, found by a new user: at ``--speed 8`` and ``--concurrency 64`` neither run said
"saturated", each blamed the replayer). The gauge read from /metrics text, its summary, the verdicts
it changes, and a watch over real sockets against the fake server (FAKE_SERIAL=1 queues requests
behind one another; without it nothing waits)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from autotune.bench import ArrivalSpec, QueueWatch, ReplayTarget, replay, replay_client, summarize
from autotune.bench._queue import _gauges, server_queue
from autotune.bench._saturation import detect_saturation
from autotune.bench._timing import ScheduleLag
from tests.unit.bench.test_replay_scale import FAKE_VLLM, TIMEOUT, _free_port, one_timestamp

VLLM_TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0
"""


def test_the_gauges_are_summed_over_engines_and_a_server_without_them_has_no_queue() -> None:
    assert _gauges(VLLM_TEXT) == (4.0, 6.0)
    assert _gauges("vllm:prompt_tokens_total 12\n") is None
    q = server_queue([(0.0, 1.0), (2.0, 8.0), (3.0, 8.0), (0.0, 2.0)])
    assert q is not None and q.samples == 4 and q.queued_share == 0.5 and q.waiting_max == 3.0
    assert q.queued and not q.empty and "50% of 4 samples (peak 3 waiting, 8 running)" in q.phrase()
    assert server_queue([]) is None
    assert not server_queue([(5.0, 1.0)] * 3).queued  # type: ignore[union-attr]  # too few samples to judge


def _short_open_loop(n: int = 24, gap: float = 0.02, service: float = 0.03) -> dict[str, np.ndarray]:
    """A short burst a one-at-a-time server works through (arrivals every 20 ms, 30 ms each): served at
    two thirds of the planned rate, but too short for its TTFT to rise the detector's 250 ms."""
    scheduled = np.arange(n) * gap
    ttft = np.arange(n) * service - scheduled + 0.01
    return {"scheduled": scheduled, "sent": scheduled, "ttft": ttft, "latency": ttft + 0.02}


def test_a_held_server_queue_with_arrivals_served_behind_plan_is_saturation() -> None:
    a = _short_open_loop()
    plain = detect_saturation(a["scheduled"], a["sent"], a["ttft"], a["latency"])
    assert not plain.saturated  # the client side alone does not see it
    held = server_queue([(6.0, 1.0)] * 5 + [(0.0, 1.0)])
    sat = detect_saturation(a["scheduled"], a["sent"], a["ttft"], a["latency"], queue=held)
    assert sat.saturated and "vllm:num_requests_waiting" in sat.note()
    empty = server_queue([(0.0, 1.0)] * 6)
    assert not detect_saturation(a["scheduled"], a["sent"], a["ttft"], a["latency"], queue=empty).saturated


def test_a_late_replay_is_blamed_on_the_server_only_where_its_queue_held() -> None:
    late = ScheduleLag(p50_ms=40.0, p99_ms=300.0, max_ms=320.0, mean_gap_ms=10.0, tolerance_ms=25.0)
    assert "the replayer itself was late" in late.note() and "vLLM" not in late.note()
    queued = ScheduleLag(**{**late.__dict__, "server_queue": server_queue([(4.0, 2.0)] * 6)})
    assert "the server could not keep up: vLLM's own queue" in queued.note()
    assert "replayer itself" not in queued.note()
    empty = ScheduleLag(**{**late.__dict__, "server_queue": server_queue([(0.0, 2.0)] * 6)})
    assert (
        "replayer itself was late" in empty.note()
        and "vLLM's own queue stayed empty (6 samples)" in empty.note()
    )


@pytest.fixture(params=["serial", "parallel"])
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    port = _free_port()
    env = {**os.environ, "FAKE_TTFT_S": "0.12"}
    if request.param == "serial":
        env["FAKE_SERIAL"] = "1"
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_VLLM), "--model", "fake", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(base + "/health", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the fake server did not start")
        time.sleep(0.1)
    yield request.param, base
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_the_watch_sees_the_queue_of_a_one_at_a_time_server_and_none_otherwise(fake: tuple[str, str]) -> None:
    """20 requests at once: served one at a time (0.12 s each) they wait about 2.4 s in the fake's
    queue; served together nothing waits."""
    kind, base = fake

    async def go():  # type: ignore[no-untyped-def]
        async with replay_client(max_in_flight=64, timeout=TIMEOUT) as client:
            watch = QueueWatch(base, interval_s=0.2)
            async with watch:
                result = await replay(
                    client, ReplayTarget(base, "fake"), one_timestamp(20), ArrivalSpec("timestamps")
                )
            return result, watch.result()

    result, queue = asyncio.run(go())
    figures = summarize(result.timings, result.duration_s, arrival=ArrivalSpec("timestamps"), queue=queue)
    if kind == "serial":  # about 2.4 s: a dozen samples, nearly all with requests waiting
        assert queue is not None and queue.judged and queue.queued and queue.waiting_max >= 5, queue
        assert figures.server_queue == queue.as_dict()
    else:  # done in a fraction of a second: at most a sample, no request waiting
        assert queue is None or (queue.waiting_max == 0 and not queue.queued), queue
