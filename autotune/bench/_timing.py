"""What one replayed request measured (client side), and how late the replayer sent requests."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench._queue import ServerQueue

__all__ = ["LAG_CEILING_MS", "LAG_FLOOR_MS", "RequestTiming", "ScheduleLag", "schedule_lag"]

# A run is behind its schedule (its figures measure another load than planned) when the lag p99
# exceeds a tenth of the larger of two times, kept within [LAG_FLOOR_MS, LAG_CEILING_MS]:
# - the median time to first token: a request sent L late finds the server's queue at most about
#   L of work different, so its TTFT moves by about L at most; a tenth of the median TTFT is below
#   the run-to-run spread of a trial's TTFT percentiles (benchmarks/RESULTS.md, repeatability);
# - the mean planned gap between requests: a lag that small against the spacing leaves the arrival
#   pattern as planned, whatever the TTFT.
# The floor is the event loop's own jitter (p99 3-4 ms on a busy 2-core machine at 250-500 req/s);
# the ceiling says 50 ms late is late whatever the TTFT (an overloaded trial's TTFT of seconds
# would otherwise excuse lags that reshape any sub-second burst).
LAG_FLOOR_MS = 5.0
LAG_CEILING_MS = 50.0
_LAG_SHARE = 0.1

_MESSAGE_RE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')
_REASON_CHARS = 200
_NOT_THE_REQUEST = frozenset({401, 403, 404, 408, 429})


@dataclass(frozen=True)
class RequestTiming:
    """Times are seconds. ``scheduled`` and ``sent`` are offsets from the start of the run."""

    request_id: str
    session: str | None
    scheduled: float
    sent: float
    ttft: float | None  # first streamed chunk with choices minus send time
    latency: float | None  # last chunk minus send time
    itl: tuple[float, ...]  # gaps between chunks
    output_tokens: int
    prompt_tokens: int | None
    # why it failed: "HTTP 400: <the first 300 characters of the body>", "stream error: ...",
    # or the client's exception ("ConnectError: ..."); None when it succeeded
    error: str | None = None
    status: int | None = None  # HTTP status of the answer; None when no answer came (connection error)
    # of ``sent - scheduled``, the seconds the request waited for one of the replayer's in-flight
    # slots (all taken: requests finish more slowly than the schedule sends them); the rest of the
    # lag is the replayer's own (CPU, a busy event loop)
    slot_wait: float = 0.0
    source: str | None = None  # where the request came from, "<workload file>:<line>"

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None

    @property
    def lag(self) -> float:
        return self.sent - self.scheduled

    @property
    def refused(self) -> bool:
        """The server refused the request itself (HTTP 4xx: an empty prompt, too many tokens), not
        the client (401/403: the API key, 404: the model name, 408/429: the server's load)."""
        return self.status is not None and 400 <= self.status < 500 and self.status not in _NOT_THE_REQUEST

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.latency is None or self.ttft is None or self.output_tokens <= 1:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)

    @property
    def failure_reason(self) -> str | None:
        """One line naming why the request failed, e.g. ``HTTP 400: 'max_tokens' ... is too large:
        4000. This model's maximum context length is 2048 tokens and ...``: the status and the
        first line of the server's message (from vLLM's JSON error body, either shape), or of the
        error text, cut to 200 characters."""
        if self.ok:
            return None
        if self.error is None:
            return "no output"
        text = self.error
        prefix = ""
        if text.startswith(("HTTP ", "stream error: ")) and ": " in text:
            head, _, text = text.partition(": ")
            prefix = head + ": "
        found = _MESSAGE_RE.search(text)
        if found is not None:
            try:
                text = json.loads(f'"{found.group(1)}"')
            except json.JSONDecodeError:  # cut inside an escape by the 300-character excerpt
                text = found.group(1)
        first = (text.strip().splitlines() or [""])[0]
        return (prefix + first)[:_REASON_CHARS].rstrip()


@dataclass(frozen=True)
class ScheduleLag:
    """How late requests left against the plan (``RequestTiming.lag``), and whether that is too late."""

    p50_ms: float
    p99_ms: float
    max_ms: float
    mean_gap_ms: float | None  # mean planned gap between requests (None for fewer than 2)
    tolerance_ms: float
    ttft_p50_ms: float | None = None  # median time to first token of the requests that succeeded
    # of the lag of the requests later than the tolerance, the share spent waiting for an in-flight
    # slot (RequestTiming.slot_wait); None when none was that late
    slot_share: float | None = None
    server_queue: ServerQueue | None = None  # vLLM's own queue during the replay (bench._queue)

    @property
    def behind(self) -> bool:
        return self.p99_ms > self.tolerance_ms

    def note(self) -> str:
        """Empty when on schedule; else one line saying how far behind, against what, and why."""
        if not self.behind:
            return ""
        basis = [f"median TTFT {self.ttft_p50_ms:.1f} ms"] if self.ttft_p50_ms is not None else []
        if self.mean_gap_ms is not None:
            basis.append(f"mean planned gap {self.mean_gap_ms:.1f} ms")
        queue = self.server_queue
        if self.slot_share is not None and self.slot_share >= 0.5:
            why = (
                f"{self.slot_share:.0%} of it waiting for an in-flight slot: requests in flight finished "
                "more slowly than the schedule sent new ones (usually the server)"
            )
        elif queue is not None and queue.queued:
            why = f"the server could not keep up: {queue.phrase()}"
        else:
            why = "the replayer itself was late (its CPU or a busy event loop), not waiting for a slot"
            if queue is not None and queue.empty:
                why += f", while vLLM's own queue stayed empty ({queue.samples} samples)"
        return (
            f"replay behind its schedule, figures unreliable: lag p99 {self.p99_ms:.1f} ms "
            f"(max {self.max_ms:.1f} ms), allowed {self.tolerance_ms:.1f} ms"
            + (f" ({', '.join(basis)})" if basis else "")
            + f"; {why}"
        )


def _tolerance_ms(mean_gap_ms: float | None, ttft_p50_ms: float | None) -> float:
    basis = max(mean_gap_ms or 0.0, ttft_p50_ms or 0.0)
    if mean_gap_ms is None and ttft_p50_ms is None:
        return LAG_CEILING_MS
    return min(LAG_CEILING_MS, max(LAG_FLOOR_MS, _LAG_SHARE * basis))


def schedule_lag(timings: Sequence[RequestTiming]) -> ScheduleLag:
    """Lag percentiles of all requests (early ones count as 0) and the tolerance for this run."""
    if not timings:
        return ScheduleLag(0.0, 0.0, 0.0, None, LAG_CEILING_MS)
    n = len(timings)
    lags = np.maximum(np.fromiter((t.lag for t in timings), float, n), 0.0) * 1000.0
    scheduled = np.fromiter((t.scheduled for t in timings), float, n)
    gap = float(scheduled.max() - scheduled.min()) * 1000.0 / (n - 1) if n > 1 else None
    ttfts = [t.ttft for t in timings if t.ok and t.ttft is not None]
    ttft = float(np.median(ttfts)) * 1000.0 if ttfts else None
    tolerance = _tolerance_ms(gap, ttft)
    late = lags > tolerance
    share = None
    if late.any():
        waits = np.fromiter((t.slot_wait for t in timings), float, n)[late] * 1000.0
        share = float(min(1.0, waits.sum() / lags[late].sum()))
    return ScheduleLag(
        p50_ms=float(np.percentile(lags, 50)),
        p99_ms=float(np.percentile(lags, 99)),
        max_ms=float(lags.max()),
        mean_gap_ms=gap,
        tolerance_ms=tolerance,
        ttft_p50_ms=ttft,
        slot_share=share,
    )
