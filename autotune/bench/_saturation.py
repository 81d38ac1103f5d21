"""Whether a replay saturated the server: its requests queued behind the arrivals, so that the
figures measure the length of a queue (which grows with the workload's length), not the
configuration.

Pure numbers over the per-request timings (seconds, as :class:`RequestTiming` and the trial's
``.requests.npz`` hold them). The evidence, any one of which is enough:

- **TTFT growing with position**: the median time to first token of the last third of the
  requests (in order of planned arrival) is at least ``GROWTH`` times the first third's and
  ``MIN_RISE_MS`` more, and the TTFT rises steadily with position (Spearman's rank correlation at
  least ``MIN_RANK_CORRELATION``): a queue that grows through the replay, not one slow request;
- **completion lag growing** (open loop only): the same test on each request's completion against
  its planned arrival (``lag + latency``), which also counts the time it waited to be sent;
- **in-flight slots pinned** (open loop only): at least ``PINNED_SHARE`` of the requests waited for
  one of the replayer's in-flight slots (``slot_wait``): the server finished requests more slowly
  than the schedule sent new ones;
- **the server's own queue held** (when sampled, :mod:`autotune.bench._queue`): vLLM's
  ``vllm:num_requests_waiting`` was above zero in at least half the samples, and the requests were
  served below the planned rate (open loop) or their TTFT rose (closed loop). A queue vLLM keeps
  for most of a replay is what "cannot keep up" means; a short replay whose TTFT has no time to
  grow shows it there first (the issue-45 runs at ``--speed 8`` and ``--concurrency 64``).

A closed loop at concurrency N holds N requests in flight by design, and its requests never wait for
a slot, so only the TTFT trend counts there. The thresholds are wide on purpose: on a busy 2-core
host the TTFT of one configuration varies by 20-30% between passes and single requests by 2x
(benchmarks/RESULTS.md), far below a 2x median rise with a steady trend; fewer than
``MIN_REQUESTS`` measured requests are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench._queue import ServerQueue
from autotune.bench._timing import RequestTiming

__all__ = [
    "GROWTH",
    "MIN_RANK_CORRELATION",
    "MIN_REQUESTS",
    "MIN_RISE_MS",
    "PINNED_SHARE",
    "Saturation",
    "detect_saturation",
    "saturation_of",
]

GROWTH = 2.0  # last third's median over the first third's (an ideal queue: 5x)
MIN_RISE_MS = 250.0  # and at least this much higher (a sub-millisecond TTFT tripling is not a queue)
MIN_RANK_CORRELATION = 0.6  # a steady rise with position, not a few slow requests at the end
SERVED_SHARE = 0.9  # served below this share of the planned rate, with vLLM's queue held: saturated
PINNED_SHARE = 0.25  # of the requests waited for an in-flight slot (more than _SLOT_WAIT_S)
MIN_REQUESTS = 9  # three per third
_SLOT_WAIT_S = 0.005  # the event loop's own jitter (bench._timing.LAG_FLOOR_MS)
_HEADROOM = 0.8  # a suggested rate or speed leaves the server this share of what it served


@dataclass(frozen=True)
class Saturation:
    """The verdict and its evidence (one phrase each); ``offered_rps``/``served_rps``: requests per
    second planned and completed (open loop), for the fix."""

    saturated: bool
    evidence: tuple[str, ...] = ()
    offered_rps: float | None = None
    served_rps: float | None = None
    closed_loop: bool = False

    def note(self, speed: float | None = None) -> str:
        """Empty when not saturated; else one line: what, the evidence, the fix (``speed``: the
        run's ``--speed``, for a suggested one)."""
        if not self.saturated:
            return ""
        evidence = list(self.evidence)
        if self.offered_rps and self.served_rps is not None:
            evidence.append(
                f"arrivals planned at {self.offered_rps:.3g} req/s, served {self.served_rps:.3g} req/s"
            )
        return (
            "saturated: the server could not keep up with the arrivals and its requests queued, so its "
            f"figures measure the queue, which grows with the workload's length ({'; '.join(evidence)}); "
            f"fix: {self.fix(speed)}"
        )

    def fix(self, speed: float | None = None) -> str:
        if self.closed_loop:
            return "a lower --concurrency or a shorter workload"
        ratio = (self.served_rps / self.offered_rps) if self.offered_rps and self.served_rps else None
        if ratio is None:
            return "a lower --speed, a --rate the server keeps up with, or a shorter workload"
        rate = _round2(_HEADROOM * (self.served_rps or 0.0))
        slower = f"--speed {_round2(_HEADROOM * ratio * speed)}" if speed else "a lower --speed"
        return f"{slower}, --rate {rate} or a shorter workload"


def _round2(x: float) -> str:
    return f"{x:.2g}"


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float)


def _growth(values: np.ndarray, label: str) -> str | None:
    """The phrase saying that ``values`` (seconds, in arrival order) grew through the run; None if not."""
    k = len(values) // 3
    head, tail = float(np.median(values[:k])) * 1000.0, float(np.median(values[-k:])) * 1000.0
    if tail < GROWTH * max(head, 1e-9) or tail - head < MIN_RISE_MS:
        return None
    rho = float(np.corrcoef(np.arange(len(values), dtype=float), _ranks(values))[0, 1])
    if not rho >= MIN_RANK_CORRELATION:
        return None
    return (
        f"{label} grew {tail / max(head, 1e-9):.1f}x from the first third of the requests to the last "
        f"({head:,.0f} -> {tail:,.0f} ms, rank correlation with position {rho:.2f})"
    )


def detect_saturation(
    scheduled: np.ndarray,
    sent: np.ndarray,
    ttft: np.ndarray,
    latency: np.ndarray,
    slot_wait: np.ndarray | None = None,
    *,
    closed_loop: bool = False,
    queue: ServerQueue | None = None,
) -> Saturation:
    """The verdict over one replay's requests (seconds; NaN TTFT or latency: a failed request)."""
    scheduled, sent = np.asarray(scheduled, float), np.asarray(sent, float)
    ttft, latency = np.asarray(ttft, float), np.asarray(latency, float)
    ok = np.isfinite(ttft) & np.isfinite(latency)
    if int(ok.sum()) < MIN_REQUESTS:
        return Saturation(False, closed_loop=closed_loop)
    order = np.argsort(scheduled[ok], kind="stable")
    evidence = [e for e in [_growth(ttft[ok][order], "TTFT p50")] if e]
    offered = served = None
    if not closed_loop:
        completion = (np.maximum(sent - scheduled, 0.0) + latency)[ok][order]
        grew = _growth(completion, "completion lag p50")
        if grew and not evidence:
            evidence.append(grew)
        if slot_wait is not None and len(slot_wait) == len(sent):
            waited = int((np.asarray(slot_wait, float) > _SLOT_WAIT_S).sum())
            if waited >= PINNED_SHARE * len(sent):
                evidence.append(f"{waited} of {len(sent)} requests waited for an in-flight slot")
        span = float(scheduled.max() - scheduled.min())
        end = float(np.nanmax(np.where(ok, sent + latency, np.nan)))
        if span > 0 and end > scheduled.min():
            offered = (len(scheduled) - 1) / span
            served = int(ok.sum()) / (end - float(scheduled.min()))
    if queue is not None and queue.queued and not evidence:
        behind = served is not None and offered is not None and served < SERVED_SHARE * offered
        rose = closed_loop and _rise(ttft[ok][order])
        if behind or rose:
            evidence.append(queue.phrase())
    return Saturation(bool(evidence), tuple(evidence), offered, served, closed_loop)


def _rise(values: np.ndarray) -> bool:
    """The last third's median TTFT at least ``GROWTH`` times the first third's (no trend test: a
    closed loop fills its queue at once)."""
    k = len(values) // 3
    return bool(np.median(values[-k:]) >= GROWTH * max(float(np.median(values[:k])), 1e-9))


def saturation_of(
    timings: Sequence[RequestTiming] | Mapping[str, np.ndarray],
    *,
    closed_loop: bool = False,
    queue: ServerQueue | None = None,
) -> Saturation:
    """:func:`detect_saturation` over request timings, or over the arrays of a trial's
    ``.requests.npz`` (``scheduled``, ``sent``, ``ttft``, ``latency``, ``slot_wait``)."""
    if isinstance(timings, Mapping):
        a = timings
        return detect_saturation(
            a["scheduled"], a["sent"], a["ttft"], a["latency"], a.get("slot_wait"),
            closed_loop=closed_loop, queue=queue,
        )  # fmt: skip
    nan = float("nan")
    ok = [t.ok for t in timings]
    return detect_saturation(
        np.array([t.scheduled for t in timings], float),
        np.array([t.sent for t in timings], float),
        np.array(
            [t.ttft if o and t.ttft is not None else nan for t, o in zip(timings, ok, strict=True)], float
        ),
        np.array(
            [t.latency if o and t.latency is not None else nan for t, o in zip(timings, ok, strict=True)],
            float,
        ),
        np.array([t.slot_wait for t in timings], float),
        closed_loop=closed_loop,
        queue=queue,
    )
