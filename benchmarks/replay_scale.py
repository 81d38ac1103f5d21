"""The replayer at scale (issue 17): a large workload whose requests all share one timestamp.

Against the fake server (tests/fakes/fake_vllm.py, 1 output token, no made-up latency) it measures
what the replayer itself does with N requests due at once: the wall time, the requests/s sent, the
lag of each request against its planned time (with every request due at t=0, that is the wait for
one of ``max_in_flight`` slots: back-pressure, not timer jitter), the peak number in flight, the
tuner process's peak RSS and CPU time per request; then how fast a replay cancelled mid-run
returns (Ctrl-C or SIGTERM arrive as a cancellation) and whether any task is left.

    python benchmarks/replay_scale.py                   # 100,000 requests; a few minutes on 2 cores
    python benchmarks/replay_scale.py --quick           # 2,000 requests, seconds
    python benchmarks/replay_scale.py --requests 3000 --client plain   # one large httpx pool instead
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np
import psutil

from autotune.bench import DEFAULT_MAX_IN_FLIGHT, ArrivalSpec, ReplayTarget, replay, replay_client, summarize
from autotune.engine import free_port
from autotune.workload import Workload, WorkloadRequest

FAKE_VLLM = c.REPO / "tests" / "fakes" / "fake_vllm.py"


def one_timestamp(n: int) -> Workload:
    reqs = tuple(
        WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=1, prompt=f"q{i}", timestamp=0.0)
        for i in range(n)
    )
    return Workload(path=Path(f"<{n} requests at one timestamp>"), requests=reqs)


def _client(max_in_flight: int, kind: str) -> httpx.AsyncClient:
    timeout = httpx.Timeout(120.0, connect=30.0)
    if kind == "sharded":
        return replay_client(max_in_flight=max_in_flight, timeout=timeout)
    # one httpx pool as large as the replayer's limit (what a plain AsyncClient gives)
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
    return httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits)


async def _full_run(base: str, n: int, max_in_flight: int, kind: str = "sharded") -> dict[str, Any]:
    wl = one_timestamp(n)
    cpu0 = time.process_time()
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
    cpu = time.process_time() - cpu0
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
    }


async def _cancel_run(
    base: str, n: int, max_in_flight: int, after_s: float, kind: str = "sharded"
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
    base = f"http://127.0.0.1:{port}"
    load = {"start": c.load_average()}
    rss_before = psutil.Process().memory_info().rss
    try:
        full = asyncio.run(_full_run(base, args.requests, args.max_in_flight, args.client))
        # ru_maxrss: KiB on Linux; the peak of this process so far (the full run dominates it)
        full["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        full["rss_before_mib"] = rss_before / 2**20
        cancel = asyncio.run(
            _cancel_run(base, args.requests, args.max_in_flight, args.cancel_after, args.client)
        )
    finally:
        fake.terminate()
        try:
            fake.wait(timeout=5)
        except subprocess.TimeoutExpired:
            fake.kill()
    load["end"] = c.load_average()
    return {"client": args.client, "full": full, "cancel": cancel, "load_average": load}


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def markdown(r: dict[str, Any]) -> str:
    f, k = r["full"], r["cancel"]
    lines = [
        c.md_header(
            f"Replayer at scale: {f['requests']:,} requests at one timestamp (fake server, {r['client']} client)",
            r["env"],
            r["load_average"],
        ),
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
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, help="requests at one timestamp (default 100,000; quick 2,000)")
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
        choices=("sharded", "plain"),
        default="sharded",
        help="sharded: autotune.bench.replay_client (pools of 4 connections); plain: one httpx pool "
        "as large as the in-flight limit, to show what that costs",
    )
    args = p.parse_args(argv)
    args.requests = args.requests or (2000 if args.quick else 100_000)
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
