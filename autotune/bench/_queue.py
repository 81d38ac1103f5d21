"""The server's own queue during a replay: vLLM's ``vllm:num_requests_waiting`` gauge, sampled from
``/metrics`` while the requests run.

A late client and a server that cannot keep up look alike from the client's side (requests finish
later than planned). vLLM tells them apart itself: a request it cannot schedule yet (every sequence
slot taken, the KV cache full, the step's token budget spent) waits in its queue, which the gauge
counts. A queue held for most of a replay is the server's doing; a queue that stayed empty while the
replay fell behind its schedule is the replayer's.

Sampling runs on the replay's event loop: one GET every ``interval_s`` and a regular expression over
the answer (no full Prometheus parse: every millisecond spent on the loop delays the requests), on
a connection of its own (the replayer's client holds at most its in-flight limit of connections: a
sample must not take a request's slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass, field

import httpx

__all__ = ["MIN_SAMPLES", "QUEUED_SHARE", "QueueWatch", "ServerQueue", "server_queue"]

QUEUED_SHARE = 0.5  # of the samples with a request waiting: the server, not a passing burst
MIN_SAMPLES = 4  # fewer samples than this (a replay under 2 s at 0.5 s) are not judged
_INTERVAL_S = 0.5
_GAUGE = re.compile(r"^vllm:num_requests_(waiting|running)(?:\{[^}]*\})? ([0-9.eE+-]+|NaN)\s*$", re.M)


@dataclass(frozen=True)
class ServerQueue:
    """What the gauge showed over one replay: samples taken, the share with a request waiting, the
    peak and mean waiting, the peak running."""

    samples: int
    queued_share: float
    waiting_max: float
    waiting_mean: float
    running_max: float

    @property
    def judged(self) -> bool:
        return self.samples >= MIN_SAMPLES

    @property
    def queued(self) -> bool:
        """The server held a queue for most of the replay (it could not keep up)."""
        return self.judged and self.queued_share >= QUEUED_SHARE

    @property
    def empty(self) -> bool:
        """No sample saw a request waiting in the server."""
        return self.judged and self.waiting_max == 0

    def phrase(self) -> str:
        return (
            f"vLLM's own queue (vllm:num_requests_waiting) held requests in {self.queued_share:.0%} of "
            f"{self.samples} samples (peak {self.waiting_max:g} waiting, {self.running_max:g} running)"
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "samples": self.samples,
            "queued_share": round(self.queued_share, 3),
            "waiting_max": self.waiting_max,
            "waiting_mean": round(self.waiting_mean, 3),
            "running_max": self.running_max,
        }


def server_queue(samples: list[tuple[float, float]]) -> ServerQueue | None:
    """The summary of (waiting, running) samples; None when there are none (no gauge, no answer)."""
    if not samples:
        return None
    waiting = [w for w, _ in samples]
    return ServerQueue(
        samples=len(samples),
        queued_share=sum(w > 0 for w in waiting) / len(samples),
        waiting_max=max(waiting),
        waiting_mean=sum(waiting) / len(samples),
        running_max=max(r for _, r in samples),
    )


def _gauges(text: str) -> tuple[float, float] | None:
    found: dict[str, float] = {}
    for kind, value in _GAUGE.findall(text):
        v = float(value)
        if v == v:  # several engines: the sum of their queues
            found[kind] = found.get(kind, 0.0) + v
    if "waiting" not in found:
        return None
    return found["waiting"], found.get("running", 0.0)


@dataclass
class QueueWatch:
    """``async with QueueWatch(url):`` samples the gauge until the block ends; ``result()`` then
    summarizes it (None where the server has no such gauge)."""

    base_url: str
    path: str = "/metrics"
    interval_s: float = _INTERVAL_S
    samples: list[tuple[float, float]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> ServerQueue | None:
        """Stop sampling; what it saw."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.result()

    async def __aenter__(self) -> QueueWatch:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
            while True:
                await asyncio.sleep(self.interval_s)
                try:
                    resp = await client.get(self.base_url + self.path)
                except httpx.HTTPError:
                    continue
                if resp.status_code != 200:
                    return  # no metrics here: nothing to watch
                got = _gauges(resp.text)
                if got is None:
                    return
                self.samples.append(got)

    def result(self) -> ServerQueue | None:
        return server_queue(self.samples)
