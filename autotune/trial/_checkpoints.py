"""The checkpoints of one replay pass: the figures so far reported to the study at each checkpoint,
and the answer that stops the pass.

The reports run on a thread of their own, in order, never on the replay's loop: a report writes the
study's storage (a SQLite commit that waits on the disk and on the heartbeat thread's lock), and on
the CPU build one such write held the replayer for up to 0.5 s while requests were in flight, whose
TTFT then measured the tool instead of vLLM (benchmarks/RESULTS.md, issue 14)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from autotune.bench import RequestTiming, summarize
from autotune.study import TrialListener

__all__ = ["PassCheckpoints"]


class PassCheckpoints:
    """Collects pass ``k``'s timings as they finish; with a listener, reports the figures so far at
    each of ``count`` checkpoints and sets :attr:`stop` when an answer says to stop. ``final``: the
    trial's last pass, whose last checkpoint is reported but never stops it. Made on the running loop."""

    def __init__(
        self,
        listener: TrialListener | None,
        *,
        k: int,
        count: int,
        requests: int,
        final: bool,
        slos_ms: Mapping[str, float] | None,
    ) -> None:
        self.got: list[RequestTiming] = []
        self._listener, self._k, self._count, self._final, self._slos = listener, k, count, final, slos_ms
        self._marks = {max(1, round(requests * (q + 1) / count)): q + 1 for q in range(count)}
        self._loop = asyncio.get_running_loop()
        self.stop: asyncio.Future[str] = self._loop.create_future()
        self._reports: list[asyncio.Future[str | None]] = []
        self._reporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trial-report")
        self._t_start = time.monotonic()

    def on_done(self, t: RequestTiming) -> None:
        """The replay's callback for each finished request."""
        self.got.append(t)
        q = self._marks.get(len(self.got))
        if self._listener is None or q is None or self.stop.done():
            return
        figures = summarize(self.got, time.monotonic() - self._t_start, slos_ms=self._slos).as_dict()
        fut = self._loop.run_in_executor(
            self._reporter, self._listener.checkpoint, self._k * self._count + q, figures
        )
        fut.add_done_callback(functools.partial(self._answered, q))
        self._reports.append(fut)

    def _answered(self, q: int, fut: asyncio.Future[str | None]) -> None:
        if fut.cancelled() or fut.exception() is not None or self.stop.done():
            return  # an exception is raised where the reports are awaited
        why = fut.result()
        if why is not None and not (self._final and q == self._count):
            self.stop.set_result(why)

    async def drain(self) -> None:
        """Every report stored (and its answer read), then the reporting thread gone."""
        try:
            await asyncio.gather(*self._reports)
        finally:
            self._reporter.shutdown(wait=True)
