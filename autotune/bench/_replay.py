"""Replay a workload against an OpenAI-compatible server over HTTP, streaming, and time it.

Sessions are the unit of arrival: a session's first turn starts at its planned offset (or
when a closed-loop slot frees up); each later turn is sent only after the previous turn of
the same session completed, plus its ``think_time``. With ``history="actual"``, the previous
turns' real outputs replace the recorded assistant messages of the next turn, in order, so
the prefix grows exactly as it would in production.

Scale (issue 17): one scheduler walks the sessions in order of their planned start and starts a
session's task only when its time has come *and* one of ``max_in_flight`` request slots is free,
so the number of tasks, sockets and pending requests stays bounded however many requests the
file holds and however many share a timestamp. Starting every session at once (as this module
once did) put every request into httpx's connection pool together, whose bookkeeping is
quadratic in the requests and connections it holds (see :mod:`autotune.bench._transport`): 50,000
requests at one timestamp sent nothing in 14 minutes and could not be interrupted. The client
should come from :func:`autotune.bench.replay_client`, whose cost per request grows little with
the number in flight.

Lag (issue 14): every request records how late it left against its plan (``RequestTiming.lag``)
and how much of that it spent waiting for a slot (``slot_wait``: requests in flight finished more
slowly than the schedule sent new ones, usually because of the server; the rest is the replayer's
own, its CPU or a busy event loop). A run whose
lag p99 passes the tolerance of :func:`autotune.bench.schedule_lag` is ``behind_schedule``: the
server got another load than planned, so its figures are unreliable. Cancelling :func:`replay` (Ctrl-C and SIGTERM arrive as a cancellation) cancels every request in
flight and returns once they are closed.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._request import ReplayTarget, send_request
from autotune.bench._timing import RequestTiming, schedule_lag
from autotune.workload import Workload, WorkloadRequest

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "ReplayResult", "ReplayTarget", "replay"]

log = logging.getLogger(__name__)

History = Literal["recorded", "actual"]

# vLLM's own default --max-num-seqs on H100/H200-class GPUs: a server cannot run more at once,
# so more requests in flight would only queue inside vLLM (or inside httpx) instead of here.
DEFAULT_MAX_IN_FLIGHT = 1024


@dataclass(frozen=True)
class ReplayResult:
    timings: tuple[RequestTiming, ...]
    duration_s: float  # first send to last completion
    arrival: str
    lag_p99_ms: float = 0.0  # how late requests left versus plan (p99 over all requests)
    behind_schedule: bool = False  # lag p99 above the tolerance: the load was not as planned
    schedule_note: str = ""  # one line saying how far behind and why; empty when on schedule
    lag_max_ms: float = 0.0  # the latest request's lag
    lag_tolerance_ms: float = 0.0  # the lag p99 allowed for this run (bench._timing.schedule_lag)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # the limit on requests in flight
    # the most requests in flight at once; equal to max_in_flight when requests waited for a slot
    peak_in_flight: int = 0


def _messages_for(
    req: WorkloadRequest, outputs: Sequence[str], history: History
) -> list[dict[str, str]] | None:
    msgs = req.message_dicts()
    if msgs is None:
        return None
    if history == "actual" and outputs:
        k = 0
        for m in msgs:
            if m["role"] == "assistant" and k < len(outputs):
                m["content"] = outputs[k]
                k += 1
    return msgs


async def _sleep_until(t0: float, offset: float) -> None:
    delay = t0 + offset - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


class _Slots:
    """At most ``limit`` requests in flight; ``peak``: the most there were at once."""

    def __init__(self, limit: int) -> None:
        self._free = asyncio.Semaphore(limit)
        self._now = 0
        self.peak = 0

    async def acquire(self) -> float:
        """Take a slot; the seconds spent waiting for one (0.0 when one was free)."""
        waited = 0.0
        if self._free.locked():
            t = time.perf_counter()
            await self._free.acquire()
            waited = time.perf_counter() - t
        else:
            await self._free.acquire()
        self._now += 1
        self.peak = max(self.peak, self._now)
        return waited

    def release(self) -> None:
        self._now -= 1
        self._free.release()


class _WaitClock:
    """When the scheduler waited for a slot, so that a request that fell due while it waited counts
    that wait as its own: with 100 requests due at once and 4 slots, the 5th request's lag and
    the 6th's are both the wait for the first wave, though only the 5th called ``acquire`` then."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []
        self._total: list[float] = []  # the waiting done by the end of each wait

    def add(self, start: float, end: float) -> None:
        if end > start:
            self._starts.append(start)
            self._ends.append(end)
            self._total.append((self._total[-1] if self._total else 0.0) + end - start)

    def _until(self, t: float) -> float:
        j = bisect.bisect_right(self._starts, t) - 1
        if j < 0:
            return 0.0
        return self._total[j] - (self._ends[j] - min(t, self._ends[j]))

    def between(self, t0: float, t1: float) -> float:
        """Seconds of waiting between ``t0`` and ``t1`` (perf_counter)."""
        return self._until(t1) - self._until(t0)


def _wake_up(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _TaskSet:
    """The replay's running tasks. Unlike asyncio.TaskGroup, the first task to fail also wakes the
    scheduler from a long wait for the next arrival, and is raised as itself (not inside an
    ExceptionGroup, so callers see what they always saw); :meth:`cancel` ends every task left."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()
        self._failed: BaseException | None = None
        self._wake: asyncio.Future[None] | None = None

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._failed is not None:
            coro.close()
            raise self._failed
        task = asyncio.ensure_future(coro)
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            self._failed = task.exception()
            if self._wake is not None:
                _wake_up(self._wake)

    async def sleep_until(self, t0: float, offset: float) -> None:
        """Sleep until ``t0 + offset`` (perf_counter); a task that fails meanwhile ends the
        sleep and is raised, so that a bug is not hidden until the next planned arrival."""
        delay = t0 + offset - time.perf_counter()
        if delay > 0 and self._failed is None:
            loop = asyncio.get_running_loop()
            self._wake = wake = loop.create_future()
            timer = loop.call_later(delay, _wake_up, wake)
            try:
                await wake
            finally:
                timer.cancel()
                self._wake = None
        if self._failed is not None:
            raise self._failed

    async def join(self) -> None:
        """Wait until every task finished; raise the first failure (HTTP failures are data, see
        ``send_request``: an exception here is a bug, raised as itself as ``asyncio.gather`` did)."""
        while self._running and self._failed is None:
            await asyncio.wait(set(self._running), return_when=asyncio.FIRST_EXCEPTION)
        if self._failed is not None:
            raise self._failed

    async def cancel(self) -> None:
        running = list(self._running)
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


@dataclass
class _Run:
    """One replay's shared state: where requests go, the slots, the clock, what was measured."""

    client: httpx.AsyncClient
    target: ReplayTarget
    arrival: ArrivalSpec
    history: History
    on_done: Callable[[RequestTiming], None] | None
    slots: _Slots
    source: str  # the workload file, for each request's "<file>:<line>"
    t0: float = field(default_factory=time.perf_counter)
    timings: list[RequestTiming] = field(default_factory=list)

    async def session(
        self, turns: Sequence[WorkloadRequest], start: float, *, holds_slot: bool, waited: float = 0.0
    ) -> None:
        """Send a session's turns in order. ``holds_slot``: the scheduler already took the first
        turn's slot (released here), after ``waited`` seconds."""
        arrival, t0 = self.arrival, self.t0
        outputs: list[str] = []
        ready = start
        first_ts = turns[0].timestamp
        for i, req in enumerate(turns):
            if i > 0 and arrival.mode == "timestamps" and req.timestamp is not None and first_ts is not None:
                ready = max(ready, start + (req.timestamp - first_ts) / arrival.speed)
            if not holds_slot:
                await _sleep_until(t0, ready)
                waited = await self.slots.acquire()
            holds_slot = False
            try:
                timing, text = await send_request(
                    self.client,
                    self.target,
                    req,
                    _messages_for(req, outputs, self.history),
                    t0=t0,
                    scheduled=ready,
                    slot_wait=waited,
                    source=f"{self.source}:{req.line}",
                )
            finally:
                self.slots.release()
            self.timings.append(timing)
            if self.on_done is not None:
                self.on_done(timing)
            outputs.append(text)
            think = turns[i + 1].think_time / arrival.speed if i + 1 < len(turns) else 0.0
            ready = max(ready, time.perf_counter() - t0) + think

    async def schedule(
        self, sessions: Sequence[Sequence[WorkloadRequest]], offsets: np.ndarray | None, tasks: _TaskSet
    ) -> None:
        """Start every session at its planned offset, or (``offsets`` None: a closed loop) keep
        ``concurrency`` of them going; then wait for them all."""
        t0 = self.t0
        if offsets is not None:
            clock = _WaitClock()
            # One sleep at a time, in order of planned start: constant work per session.
            for k in np.argsort(offsets, kind="stable"):
                start = float(offsets[k])
                await tasks.sleep_until(t0, start)
                before = time.perf_counter()
                if await self.slots.acquire():  # back-pressure: a due session waits for a free slot
                    clock.add(before, time.perf_counter())
                waited = clock.between(min(t0 + start, before), time.perf_counter())
                tasks.spawn(self.session(sessions[k], start, holds_slot=True, waited=waited))
        else:
            queue = deque(sessions)

            async def worker() -> None:
                while queue:
                    await self.session(queue.popleft(), time.perf_counter() - t0, holds_slot=False)

            assert self.arrival.concurrency is not None
            for _ in range(min(self.arrival.concurrency, len(sessions))):
                tasks.spawn(worker())
        await tasks.join()

    def result(self, max_in_flight: int) -> ReplayResult:
        timings = self.timings
        end = max((t.sent + (t.latency or 0.0) for t in timings), default=0.0)
        start = min((t.sent for t in timings), default=0.0)
        timings.sort(key=lambda t: t.sent)
        lag = schedule_lag(timings)
        if lag.behind:
            log.info(
                "%s (at most %d of %d in-flight slots in use)", lag.note(), self.slots.peak, max_in_flight
            )
        return ReplayResult(
            timings=tuple(timings),
            duration_s=max(end - start, 1e-9),
            arrival=self.arrival.describe(),
            lag_p99_ms=lag.p99_ms,
            behind_schedule=lag.behind,
            schedule_note=lag.note(),
            lag_max_ms=lag.max_ms,
            lag_tolerance_ms=lag.tolerance_ms,
            max_in_flight=max_in_flight,
            peak_in_flight=self.slots.peak,
        )


async def replay(
    client: httpx.AsyncClient,
    target: ReplayTarget,
    workload: Workload,
    arrival: ArrivalSpec,
    *,
    history: History = "recorded",
    on_done: Callable[[RequestTiming], None] | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> ReplayResult:
    """Replay ``workload`` with at most ``max_in_flight`` requests in flight at once.

    ``client``: best made by :func:`autotune.bench.replay_client` with the same ``max_in_flight``;
    a client whose pool allows fewer connections queues requests inside httpx, where their lag
    is not seen here, and one large httpx pool costs CPU per request in proportion to its size.
    Each request's timing names its line (``RequestTiming.source``, ``<file>:<line>``).
    """
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
    sessions = list(workload.sessions().values())
    offsets = plan_offsets([s[0].timestamp for s in sessions], arrival)
    # the clock (``_Run.t0``) starts now, once the plan is made
    run = _Run(client, target, arrival, history, on_done, _Slots(max_in_flight), source=str(workload.path))
    tasks = _TaskSet()
    try:
        await run.schedule(sessions, offsets, tasks)
    finally:
        await tasks.cancel()  # cancelled (Ctrl-C, SIGTERM) or a bug: no request outlives the replay
    return run.result(max_in_flight)
