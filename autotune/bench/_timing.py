"""What one replayed request measured (client side), and how late the replayer sent requests."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LAG_CEILING_MS", "LAG_FLOOR_MS", "RequestTiming", "ScheduleLag", "schedule_lag"]

# A run is behind its schedule when the lag p99 exceeds 10% of the mean planned gap between
# requests, kept within [LAG_FLOOR_MS, LAG_CEILING_MS]: a few ms is the event loop's own timer
# jitter; 50 ms late is late whatever the rate.
LAG_FLOOR_MS = 5.0
LAG_CEILING_MS = 50.0
_LAG_SHARE_OF_GAP = 0.1

_MESSAGE_RE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')
_REASON_CHARS = 200


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

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None

    @property
    def lag(self) -> float:
        return self.sent - self.scheduled

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

    @property
    def behind(self) -> bool:
        return self.p99_ms > self.tolerance_ms

    def note(self) -> str:
        """Empty when on schedule; else one line saying how far behind."""
        if not self.behind:
            return ""
        gap = f", mean planned gap {self.mean_gap_ms:.1f} ms" if self.mean_gap_ms is not None else ""
        return (
            f"the replayer fell behind its schedule: lag p99 {self.p99_ms:.1f} ms (max {self.max_ms:.1f} ms), "
            f"allowed {self.tolerance_ms:.1f} ms{gap}; the server got its requests later than planned"
        )


def schedule_lag(timings: Sequence[RequestTiming]) -> ScheduleLag:
    """Lag percentiles of all requests (early ones count as 0) and the tolerance for this schedule."""
    if not timings:
        return ScheduleLag(0.0, 0.0, 0.0, None, LAG_CEILING_MS)
    lags = np.maximum(np.fromiter((t.lag for t in timings), float, len(timings)), 0.0) * 1000.0
    scheduled = np.fromiter((t.scheduled for t in timings), float, len(timings))
    gap = float(scheduled.max() - scheduled.min()) * 1000.0 / (len(timings) - 1) if len(timings) > 1 else None
    tolerance = (
        LAG_CEILING_MS if gap is None else min(LAG_CEILING_MS, max(LAG_FLOOR_MS, _LAG_SHARE_OF_GAP * gap))
    )
    return ScheduleLag(
        p50_ms=float(np.percentile(lags, 50)),
        p99_ms=float(np.percentile(lags, 99)),
        max_ms=float(lags.max()),
        mean_gap_ms=gap,
        tolerance_ms=tolerance,
    )
