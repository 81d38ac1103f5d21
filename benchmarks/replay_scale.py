"""The replayer at scale (issues 17 and 14): a large burst, and its ceiling on schedule.

Against the fake server (tests/fakes/fake_vllm.py, 1 output token, no made-up latency), in a
process of its own on the same machine:

- burst: N requests sharing one timestamp: the wall time, the requests/s sent, the lag of each
  request against its planned time (with every request due at t=0, that is the wait for one of
  ``max_in_flight`` slots: back-pressure, not timer jitter), the peak number in flight, the tuner
  process's peak RSS and the CPU time per request of the replayer and of the server; then how fast
  a replay cancelled mid-run returns (Ctrl-C or SIGTERM arrive as a cancellation) and whether any
  task is left;
- paced (``--rates``): requests evenly spaced at each target rate for ``--seconds``: the rate
  issued, the lag percentiles and the replayer's own verdict (``behind_schedule``). The ceiling is
  the highest rate issued at its target (within 2%) and on schedule.

    python benchmarks/replay_scale.py                   # 100,000 requests, then 5 rates; minutes
    python benchmarks/replay_scale.py --quick           # 2,000 requests, 2 short rates; seconds
    python benchmarks/replay_scale.py --requests 10000 --rates 500,1000,1500 --seconds 5
    python benchmarks/replay_scale.py --client sharded   # httpx's own transport in pools of 4, as before issue 14
    python benchmarks/replay_scale.py --client seam      # the tool's aiohttp transport, every request through httpx's client
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np
import psutil

from autotune.bench import (
    DEFAULT_MAX_IN_FLIGHT,
    AiohttpTransport,
    ArrivalSpec,
    ReplayTarget,
    replay,
    replay_client,
    summarize,
)
from autotune.engine._process import free_port
from autotune.workload import Workload, WorkloadRequest

FAKE_VLLM = c.REPO / "tests" / "fakes" / "fake_vllm.py"


def one_timestamp(n: int) -> Workload:
    reqs = tuple(
        WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=1, prompt=f"q{i}", timestamp=0.0)
        for i in range(n)
    )
    return Workload(path=Path(f"<{n} requests at one timestamp>"), requests=reqs)


class _CountedStream(httpx.AsyncByteStream):
    """A response body that gives its request's place in its pool back once, when closed."""

    def __init__(self, inner: httpx.AsyncByteStream, busy: list[int], shard: int) -> None:
        self._inner, self._busy, self._shard, self._open = inner, busy, shard, True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if self._open:
                self._open = False
                self._busy[self._shard] -= 1


class ShardedHttpxTransport(httpx.AsyncBaseTransport):
    """httpx's own transport in pools of 4 connections, each request to the least busy pool: what
    ``autotune.bench.replay_client`` was from issue 17 until issue 14 (kept here as the baseline)."""

    def __init__(self, max_connections: int, per_shard: int = 4) -> None:
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        verify = httpx.create_ssl_context()
        shards = -(-max_connections // per_shard)
        self._pools = [
            httpx.AsyncHTTPTransport(verify=verify, limits=limits, trust_env=False) for _ in range(shards)
        ]
        self._busy = [0] * shards

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        shard = min(range(len(self._busy)), key=self._busy.__getitem__)
        self._busy[shard] += 1
        try:
            response = await self._pools[shard].handle_async_request(request)
        except BaseException:
            self._busy[shard] -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _CountedStream(response.stream, self._busy, shard)
        return response

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


CLIENTS = ("replay", "seam", "sharded", "plain")


def _client(max_in_flight: int, kind: str) -> httpx.AsyncClient:
    timeout = httpx.Timeout(120.0, connect=30.0)
    if kind == "replay":
        return replay_client(max_in_flight=max_in_flight, timeout=timeout)
    if kind == "seam":  # the replayer's POSTs through httpx's client layer too, not ReplayClient.post_stream
        transport = AiohttpTransport(max_in_flight)
        return httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
    if kind == "sharded":
        return httpx.AsyncClient(
            transport=ShardedHttpxTransport(max_in_flight), timeout=timeout, trust_env=False
        )
    # one httpx pool as large as the replayer's limit (what a plain AsyncClient gives)
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
    return httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits)


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


async def _full_run(
    base: str, server: psutil.Process, n: int, max_in_flight: int, kind: str = "replay"
) -> dict[str, Any]:
    wl = one_timestamp(n)
    cpu0, server0 = time.process_time(), _cpu_s(server)
    async with _client(max_in_flight, kind) as client:
        t0 = time.monotonic()
        result = await replay(
            client,
            ReplayTarget(base, "fake"),
            wl,
            ArrivalSpec(mode="timestamps"),
            max_in_flight=max_in_flight,
        )
        wall = time.monotonic() - t0
    cpu, server_cpu = time.process_time() - cpu0, _cpu_s(server) - server0
    figures = summarize(result.timings, result.duration_s)
    lags = np.array([t.lag for t in result.timings]) * 1000.0
    sent = np.array([t.sent for t in result.timings])
    span = float(sent.max() - sent.min()) if sent.size > 1 else 0.0
    return {
        "requests": n,
        "completed": figures.completed,
        "failed": figures.failed,
        "failures": dict(figures.failures),
        "wall_s": wall,
        "sent_per_s": (n - 1) / span if span else None,
        "completed_per_s": figures.completed / wall,
        "lag_ms": {f"p{q}": float(np.percentile(lags, q)) for q in (50, 90, 99)} | {"max": float(lags.max())},
        "behind_schedule": result.behind_schedule,
        "schedule_note": result.schedule_note,
        "max_in_flight": result.max_in_flight,
        "peak_in_flight": result.peak_in_flight,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu / n * 1e6,
        "server_cpu_us_per_request": server_cpu / n * 1e6,
    }


def evenly_spaced(rate: float, seconds: float) -> Workload:
    n = max(int(rate * seconds), 2)
    reqs = tuple(
        WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=1, prompt=f"q{i}", timestamp=i / rate)
        for i in range(n)
    )
    return Workload(path=Path(f"<{n} requests at {rate:g}/s>"), requests=reqs)


async def _paced_run(
    base: str, server: psutil.Process, rate: float, seconds: float, max_in_flight: int, kind: str
) -> dict[str, Any]:
    """Requests evenly spaced at ``rate``: what rate the replayer issued, and how late."""
    wl = evenly_spaced(rate, seconds)
    n = len(wl.requests)
    async with _client(max_in_flight, kind) as client:
        cpu0, server0 = time.process_time(), _cpu_s(server)
        result = await replay(
            client,
            ReplayTarget(base, "fake"),
            wl,
            ArrivalSpec(mode="timestamps"),
            max_in_flight=max_in_flight,
        )
        cpu, server_cpu = time.process_time() - cpu0, _cpu_s(server) - server0
    figures = summarize(result.timings, result.duration_s)
    sent = np.array([t.sent for t in result.timings])
    lags = np.maximum(np.array([t.lag for t in result.timings]), 0.0) * 1000.0
    issued = (n - 1) / float(sent.max() - sent.min())
    return {
        "target_per_s": rate,
        "requests": n,
        "issued_per_s": issued,
        "lag_ms": {f"p{q}": float(np.percentile(lags, q)) for q in (50, 90, 99)} | {"max": float(lags.max())},
        "lag_tolerance_ms": result.lag_tolerance_ms,
        "behind_schedule": result.behind_schedule,
        "on_schedule": issued >= 0.98 * rate and not result.behind_schedule,
        "schedule_note": result.schedule_note,
        "peak_in_flight": result.peak_in_flight,
        "failed": figures.failed,
        "failures": dict(figures.failures),
        "ttft_p50_ms": figures.percentiles_ms["ttft_p50"],
        "cpu_us_per_request": cpu / n * 1e6,
        "server_cpu_us_per_request": server_cpu / n * 1e6,
    }


async def _cancel_run(
    base: str, n: int, max_in_flight: int, after_s: float, kind: str = "replay"
) -> dict[str, Any]:
    """Cancel a replay after ``after_s`` seconds, as asyncio.run does on Ctrl-C; time the return."""
    async with _client(max_in_flight, kind) as client:
        done: list[object] = []
        task = asyncio.ensure_future(
            replay(
                client,
                ReplayTarget(base, "fake"),
                one_timestamp(n),
                ArrivalSpec(mode="timestamps"),
                max_in_flight=max_in_flight,
                on_done=done.append,
            )
        )
        await asyncio.sleep(after_s)
        t0 = time.monotonic()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        returned_s = time.monotonic() - t0
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    return {
        "after_s": after_s,
        "completed_before_cancel": len(done),
        "return_s": returned_s,
        "tasks_left": len(left),
    }


def _start_fake(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FAKE_TTFT_S": "0"}
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_VLLM), "--model", "fake", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake server did not start")


def measure(args: Any) -> dict[str, Any]:
    port = free_port()
    fake = _start_fake(port)
    server = psutil.Process(fake.pid)
    base = f"http://127.0.0.1:{port}"
    load = {"start": c.load_average()}
    rss_before = psutil.Process().memory_info().rss
    out: dict[str, Any] = {"client": args.client}
    try:
        if args.requests:
            full = asyncio.run(_full_run(base, server, args.requests, args.max_in_flight, args.client))
            # ru_maxrss: KiB on Linux; the peak of this process so far (the full run dominates it)
            full["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            full["rss_before_mib"] = rss_before / 2**20
            out["full"] = full
            out["cancel"] = asyncio.run(
                _cancel_run(base, args.requests, args.max_in_flight, args.cancel_after, args.client)
            )
        paced = [
            asyncio.run(_paced_run(base, server, rate, args.seconds, args.max_in_flight, args.client))
            for rate in args.rates
        ]
        out["paced"] = paced
        kept = [r["target_per_s"] for r in paced if r["on_schedule"]]
        out["ceiling_per_s"] = max(kept) if kept else None
    finally:
        fake.terminate()
        try:
            fake.wait(timeout=5)
        except subprocess.TimeoutExpired:
            fake.kill()
    load["end"] = c.load_average()
    return {**out, "load_average": load}


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _burst_markdown(f: dict[str, Any], k: dict[str, Any]) -> list[str]:
    return [
        c.md_table(
            [
                "requests",
                "in-flight limit",
                "wall s",
                "sent req/s",
                "lag p50 ms",
                "lag p99 ms",
                "peak in flight",
                "peak RSS MiB",
                "CPU us/request",
                "server CPU us/request",
                "failed",
            ],
            [
                [
                    f"{f['requests']:,}",
                    f["max_in_flight"],
                    _f(f["wall_s"]),
                    _f(f["sent_per_s"], 0),
                    _f(f["lag_ms"]["p50"]),
                    _f(f["lag_ms"]["p99"]),
                    f["peak_in_flight"],
                    _f(f["peak_rss_mib"], 0),
                    _f(f["cpu_us_per_request"], 0),
                    _f(f["server_cpu_us_per_request"], 0),
                    f["failed"],
                ]
            ],
        ),
        "",
        f"behind schedule: {f['behind_schedule']} ({f['schedule_note'] or 'on schedule'})",
        "",
        f"Cancelled after {k['after_s']:g} s ({k['completed_before_cancel']:,} requests done): "
        f"replay returned in {_f(k['return_s'] * 1000.0, 0)} ms, {k['tasks_left']} tasks left.",
    ]


def _paced_markdown(paced: list[dict[str, Any]], ceiling: float | None) -> list[str]:
    rows = [
        [
            f"{p['target_per_s']:g}",
            f"{p['requests']:,}",
            _f(p["issued_per_s"], 0),
            _f(p["lag_ms"]["p50"], 2),
            _f(p["lag_ms"]["p99"], 2),
            _f(p["lag_ms"]["max"], 1),
            _f(p["lag_tolerance_ms"], 1),
            "yes" if p["on_schedule"] else "no",
            p["peak_in_flight"],
            _f(p["cpu_us_per_request"], 0),
            _f(p["server_cpu_us_per_request"], 0),
            p["failed"],
        ]
        for p in paced
    ]
    head = [
        "target req/s",
        "requests",
        "issued req/s",
        "lag p50 ms",
        "lag p99 ms",
        "lag max ms",
        "allowed ms",
        "on schedule",
        "peak in flight",
        "CPU us/request",
        "server CPU us/request",
        "failed",
    ]
    best = f"{ceiling:g} req/s" if ceiling is not None else "none of these rates"
    return [c.md_table(head, rows), "", f"Highest rate issued at target and on schedule: {best}."]


def markdown(r: dict[str, Any]) -> str:
    title = "Replayer at scale"
    if "full" in r:
        title += f": {r['full']['requests']:,} requests at one timestamp"
    lines = [c.md_header(f"{title} (fake server, {r['client']} client)", r["env"], r["load_average"])]
    if "full" in r:
        lines += _burst_markdown(r["full"], r["cancel"])
    if r.get("paced"):
        lines += ["", *_paced_markdown(r["paced"], r["ceiling_per_s"])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument(
        "--requests", type=int, help="requests at one timestamp (default 100,000; quick 2,000; 0: no burst)"
    )
    p.add_argument(
        "--max-in-flight",
        type=int,
        default=DEFAULT_MAX_IN_FLIGHT,
        help=f"the replayer's limit on requests in flight (default {DEFAULT_MAX_IN_FLIGHT})",
    )
    p.add_argument(
        "--cancel-after",
        type=float,
        help="seconds into the second replay to cancel it (default 5; quick 1)",
    )
    p.add_argument(
        "--client",
        choices=CLIENTS,
        default="replay",
        help="replay: autotune.bench.replay_client (the tool's); seam: the same aiohttp transport with "
        "every request through httpx's client layer; sharded: httpx's own transport "
        "in pools of 4 (the tool's before issue 14); plain: one httpx pool as large as the in-flight limit",
    )
    p.add_argument(
        "--rates",
        help="paced runs: comma-separated target requests/s (default 250,500,750,1000,1500; quick 250,500; "
        "'' for none)",
    )
    p.add_argument("--seconds", type=float, help="seconds per paced rate (default 5; quick 1)")
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 2000 if args.quick else 100_000
    if args.rates is None:
        args.rates = "250,500" if args.quick else "250,500,750,1000,1500"
    args.rates = [float(x) for x in args.rates.split(",") if x.strip()]
    args.seconds = args.seconds or (1.0 if args.quick else 5.0)
    args.cancel_after = args.cancel_after or (1.0 if args.quick else 5.0)
    c.setup_logging(args.verbose)
    env = c.environment()
    t0 = time.monotonic()
    result: dict[str, Any] = {"benchmark": "replay_scale", "quick": args.quick, "env": env, **measure(args)}
    result["wall_s"] = time.monotonic() - t0
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(f"\nwall time: {result['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
