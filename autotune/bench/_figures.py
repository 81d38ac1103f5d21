"""Per-trial figures from request timings, defined as ``vllm bench serve`` defines them.

TTFT: first streamed chunk minus send time. ITL: gaps between chunks (pooled over requests).
TPOT: (latency - TTFT) / (output tokens - 1) per request. E2EL: last chunk minus send time.
Goodput: requests per second that met every SLO. Times are reported in milliseconds.
Besides the latencies: whether the replayer kept to its schedule (``behind_schedule``: when not,
the server got another load than planned and the figures are unreliable; ``schedule_note`` says
how late and why), and the commonest reasons requests failed (``failures``), so a failed trial can
say why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from autotune.bench._arrivals import ArrivalSpec
from autotune.bench._queue import ServerQueue
from autotune.bench._saturation import Saturation, saturation_of
from autotune.bench._timing import RequestTiming, schedule_lag
from autotune.metrics import PERCENTILES, figure_value, latency_figures, rate_figures

__all__ = ["PERCENTILES", "TrialFigures", "failure_counts", "meets_slos", "summarize"]

TOP_FAILURES = 5
_DIGITS_RE = re.compile(r"\d+")


@dataclass(frozen=True)
class TrialFigures:
    completed: int
    failed: int
    duration_s: float
    request_throughput: float  # completed requests / s
    output_throughput: float  # output tokens / s
    total_output_tokens: int
    percentiles_ms: Mapping[str, float]  # e.g. {"ttft_p90": 123.4, "tpot_p50": ...}
    mean_ms: Mapping[str, float]
    goodput: float | None  # requests / s meeting every SLO (None without SLOs)
    lag_p99_ms: float  # how late requests left versus plan
    # New fields have defaults: figures stored by an older version still load with TrialFigures(**d).
    behind_schedule: bool = False  # lag p99 above the tolerance (see bench._timing.schedule_lag)
    schedule_note: str = ""  # one line saying how far behind and why; empty when on schedule
    # failed requests by reason ("HTTP 400: This model's maximum context length is 2048 tokens."),
    # the commonest first, at most TOP_FAILURES reasons (the rest under "other")
    failures: Mapping[str, int] = field(default_factory=dict)
    lag_max_ms: float = 0.0  # the latest request's lag
    lag_tolerance_ms: float = 0.0  # the lag p99 allowed for this run; 0.0 in figures stored before it
    # the server could not keep up with the arrivals (see bench._saturation): the figures measure
    # its queue; ``saturation_note`` says the evidence and the fix
    saturated: bool = False
    saturation_note: str = ""
    # vLLM's own queue during the replay (bench._queue.ServerQueue.as_dict); None where not sampled
    server_queue: Mapping[str, float] | None = None

    def metric(self, name: str) -> float:
        """Any figure by name: ``ttft_p90``, ``tpot_mean``, ``output_throughput``, ``goodput``..."""
        return figure_value(self.as_dict(), name)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["percentiles_ms"] = dict(self.percentiles_ms)
        d["mean_ms"] = dict(self.mean_ms)
        d["failures"] = dict(self.failures)
        return d


def meets_slos(t: RequestTiming, slos_ms: Mapping[str, float]) -> bool:
    """SLO keys: ttft, tpot, e2el (milliseconds), as ``--goodput ttft:MS tpot:MS e2el:MS``."""
    if not t.ok:
        return False
    values = {"ttft": t.ttft, "tpot": t.tpot if t.tpot is not None else 0.0, "e2el": t.latency}
    return all((values[k] or 0.0) * 1000.0 <= limit for k, limit in slos_ms.items())


def failure_counts(timings: Sequence[RequestTiming], top: int = TOP_FAILURES) -> dict[str, int]:
    """Failed requests counted by reason, the commonest first. Reasons that differ only in their
    numbers (the requested length of each too-long prompt) count as one, shown as the first seen.
    A reason the server gave for refusing a request itself (``RequestTiming.refused``) names that
    request, ``HTTP 400: ... (at w.jsonl:3, id 'q-empty')``, or the first of several
    (``first at``), so the user can find the line to fix."""
    counts: Counter[str] = Counter()
    shown: dict[str, str] = {}
    refused: dict[str, list[RequestTiming]] = {}
    for t in timings:
        reason = t.failure_reason
        if reason is None:
            continue
        key = _DIGITS_RE.sub("#", reason)
        shown.setdefault(key, reason)
        counts[key] += 1
        if t.refused:
            refused.setdefault(key, []).append(t)
    ranked = counts.most_common()
    out = {shown[key] + _where(refused.get(key, [])): n for key, n in ranked[:top]}
    rest = sum(n for _, n in ranked[top:])
    if rest:
        out["other"] = rest
    return out


def _where(refused: Sequence[RequestTiming]) -> str:
    """`` (at w.jsonl:3, id 'q-empty')``: the first refused request of one reason; empty for none."""
    if not refused:
        return ""
    first = refused[0]
    several = len({(t.source, t.request_id) for t in refused}) > 1
    where = f"{'first at' if several else 'at'} {first.source}, " if first.source else "first, " * several
    return f" ({where}id {first.request_id!r})"


def summarize(
    timings: Sequence[RequestTiming],
    duration_s: float,
    *,
    slos_ms: Mapping[str, float] | None = None,
    arrival: ArrivalSpec | None = None,
    queue: ServerQueue | None = None,
) -> TrialFigures:
    """The figures of one replay; ``arrival``: how it was replayed, to judge it for saturation (a
    closed loop by its TTFT trend only; a speed makes the suggested fix exact). Without it (the
    partial figures a pass reports to the pruner while requests are in flight, where every
    millisecond on the event loop delays them) saturation is not judged. ``queue``: vLLM's own queue
    sampled during the replay, which tells a late replayer from a server that cannot keep up."""
    ok = [t for t in timings if t.ok]
    pct, mean = latency_figures(_series(ok))
    out_tokens = sum(t.output_tokens for t in ok)
    good = sum(meets_slos(t, slos_ms) for t in timings) if slos_ms else None
    rates = rate_figures({"completed": len(ok), "output_tokens": out_tokens, "good": good}, duration_s)
    lag = replace(schedule_lag(timings), server_queue=queue)
    saturation = _saturation(timings, arrival, queue)
    return TrialFigures(
        completed=len(ok),
        failed=len(timings) - len(ok),
        duration_s=duration_s,
        request_throughput=rates["request_throughput"] or 0.0,
        output_throughput=rates["output_throughput"] or 0.0,
        total_output_tokens=out_tokens,
        percentiles_ms=pct,
        mean_ms=mean,
        goodput=rates["goodput"],
        lag_p99_ms=lag.p99_ms,
        behind_schedule=lag.behind,
        schedule_note=lag.note(),
        failures=failure_counts(timings),
        lag_max_ms=lag.max_ms,
        lag_tolerance_ms=lag.tolerance_ms,
        saturated=saturation is not None and saturation.saturated,
        saturation_note=saturation.note(_speed(arrival)) if saturation is not None else "",
        server_queue=queue.as_dict() if queue is not None else None,
    )


def _series(ok: Sequence[RequestTiming]) -> dict[str, list[float]]:
    """The per-request series the latency figures are statistics of (seconds; ITL pooled)."""
    return {
        "ttft": [t.ttft for t in ok if t.ttft is not None],
        "tpot": [v for t in ok if (v := t.tpot) is not None],
        "itl": [g for t in ok for g in t.itl],
        "e2el": [t.latency for t in ok if t.latency is not None],
    }


def _saturation(
    timings: Sequence[RequestTiming], arrival: ArrivalSpec | None, queue: ServerQueue | None
) -> Saturation | None:
    if arrival is None:
        return None
    return saturation_of(timings, closed_loop=arrival.mode == "closed", queue=queue)


def _speed(arrival: ArrivalSpec | None) -> float | None:
    return arrival.speed if arrival is not None and arrival.mode == "timestamps" else None
