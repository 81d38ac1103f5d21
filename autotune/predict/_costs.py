"""This machine's engine costs, fitted (least squares, numpy) on measured replays.

From each request's send time, time to first token and latency (client side, the replayer's
:class:`~autotune.bench.RequestTiming`) and the prompt tokens the cache replay says its cache
served (:func:`~autotune.predict.tier_hits`):

- **prefill**: over requests that found the engine idle when sent (nothing in prefill or decode; when
  fewer than :data:`_MIN_ALONE`, those with no other prefill in progress, no queue ahead of them;
  when fewer again, all), ``TTFT = overhead + prefill x uncached tokens + host x tokens loaded from
  a host pool + decode-slowdown x requests decoding``;
- **decode** (fitted first): ``TPOT = step + per-request x running requests + prefill x other
  requests' prefill tokens per step of its decode`` (running: the mean number decoding during the
  request's own decode, itself included); the prefill fit then takes out the fixed part of the extra
  steps a prompt longer than the step's token budget takes.

A coefficient that comes out negative (noise, or a term the data cannot separate) is dropped and
the rest refitted: every cost is >= 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench import RequestTiming
from autotune.predict._kv import TierHits

__all__ = ["EngineCosts", "Replay", "RequestTimes", "fit_costs"]

_MIN_ALONE = 6  # fewer requests without a queue ahead: fit the prefill on every request


@dataclass(frozen=True)
class RequestTimes:
    """One measured replay, arrays in workload order; seconds, NaN where a request failed."""

    sent: np.ndarray
    ttft: np.ndarray
    latency: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def from_timings(cls, timings: Sequence[RequestTiming], order: Sequence[str]) -> RequestTimes:
        """The replayer's timings (sorted by send time) put in workload order by request id."""
        by_id = {t.request_id: t for t in timings}
        nan = float("nan")
        rows = [by_id.get(i) for i in order]
        return cls(
            sent=np.array([t.sent if t else nan for t in rows], dtype=float),
            ttft=np.array([t.ttft if t and t.ok and t.ttft is not None else nan for t in rows], dtype=float),
            latency=np.array([t.latency if t and t.ok and t.latency is not None else nan for t in rows]),
            output_tokens=np.array([t.output_tokens if t else 0 for t in rows], dtype=float),
        )

    @classmethod
    def passes_from_arrays(cls, arrays: Mapping[str, np.ndarray], requests: int) -> tuple[RequestTimes, ...]:
        """A trial's ``.requests.npz`` arrays (``autotune.trial.read_request_timings``): its passes one
        after the other, ``requests`` rows each (every request of the workload, failed ones too; a
        pruned last pass may be shorter), each in completion order with times from its own start.
        They hold no request ids: each pass's rows are put in planned-send order, which is workload
        order for a workload whose requests are in arrival order with distinct planned times."""
        n = len(arrays["sent"])
        out = []
        for lo in range(0, n, max(requests, 1)):
            order = lo + np.argsort(arrays["scheduled"][lo : lo + requests], kind="stable")
            ok = arrays["ok"][order].astype(bool)
            out.append(
                cls(
                    sent=arrays["sent"][order].astype(float),
                    ttft=np.where(ok, arrays["ttft"][order], np.nan),
                    latency=np.where(ok, arrays["latency"][order], np.nan),
                    output_tokens=arrays["output_tokens"][order].astype(float),
                )
            )
        return tuple(out)

    def ttft_ms(self, q: float) -> float:
        """The ``q``-th percentile of the measured TTFTs, ms (NaN when no request succeeded)."""
        ok = self.ok
        return float(np.percentile(self.ttft[ok], q)) * 1000.0 if ok.any() else float("nan")

    def tpot_ms(self, q: float) -> float:
        ok = self.ok & (self.output_tokens > 1)
        tpot = (self.latency - self.ttft)[ok] / (self.output_tokens[ok] - 1)
        return float(np.percentile(tpot, q)) * 1000.0 if ok.any() else float("nan")

    @property
    def ok(self) -> np.ndarray:
        return np.asarray(np.isfinite(self.ttft) & np.isfinite(self.latency) & np.isfinite(self.sent))


@dataclass(frozen=True)
class EngineCosts:
    """Seconds. ``host_s_per_token`` is None when no measured request loaded from a host pool."""

    overhead_s: float
    prefill_s_per_token: float
    decode_slowdown_s: float  # added to a TTFT per request decoding when it was sent
    step_s: float
    step_s_per_seq: float
    host_s_per_token: float | None = None
    requests: int = 0  # measured requests the fit used

    def as_dict(self) -> dict[str, float | int | None]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> EngineCosts:
        return cls(**data)  # type: ignore[arg-type]


def _nonnegative_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: negative ones dropped (set to 0) until none is. A
    column other than the first (the intercept) that does not vary says nothing of its cost: 0."""
    keep = np.ones(x.shape[1], dtype=bool)
    keep[1:] = np.ptp(x[:, 1:], axis=0) > 1e-9 if len(x) else False
    coef = np.zeros(x.shape[1])
    while keep.any():
        sol, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        if (sol >= 0).all():
            coef[keep] = sol
            return coef
        idx = np.flatnonzero(keep)
        keep[idx[np.argmin(sol)]] = False
    return coef


@dataclass(frozen=True)
class Replay:
    """One measured replay as the fit reads it: its timings, what its cache served per request (the
    cache replay of its configuration) and its step's token budget (``max_num_batched_tokens``)."""

    times: RequestTimes
    hits: TierHits
    batched_tokens: int


def _decode_rows(r: Replay) -> tuple[np.ndarray, np.ndarray]:
    """Rows [1, mean requests decoding, others' prefill tokens per output step] over each request's
    decode (2+ output tokens), and its TPOT: a step that also runs another request's prefill chunk is
    longer by that chunk's cost."""
    times = r.times
    ok = times.ok & (times.output_tokens > 1)
    a = (times.sent + times.ttft)[ok]
    b = (times.sent + times.latency)[ok]
    steps = times.output_tokens[ok] - 1
    span = np.maximum(b - a, 1e-9)
    overlap = np.clip(np.minimum(b[:, None], b[None, :]) - np.maximum(a[:, None], a[None, :]), 0, None)
    running = overlap.sum(axis=1) / span  # itself included (its own overlap is its span)
    first = (times.sent + times.ttft)[times.ok]  # every request's first token, and its prefill tokens
    computed = r.hits.uncached[times.ok].astype(float)
    inside = (first[None, :] > a[:, None]) & (first[None, :] <= b[:, None])
    prefill = (inside * computed[None, :]).sum(axis=1) / steps
    return np.column_stack([np.ones(len(a)), running, prefill]), (b - a) / steps


def _prefill_rows(r: Replay, step_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows [1, uncached, host, decoding at send], the TTFTs less the fixed part of the extra steps a
    prompt longer than the step's budget takes (chunked prefill), and whether each request found no
    other prefill in progress when sent."""
    times = r.times
    ok = times.ok
    s, t, lat = times.sent[ok], times.ttft[ok], times.latency[ok]
    first = s + t
    ahead = (s[None, :] <= s[:, None]) & (s[:, None] < first[None, :])
    np.fill_diagonal(ahead, False)
    decoding = ((first[None, :] <= s[:, None]) & (s[:, None] < (s + lat)[None, :])).sum(axis=1)
    uncached = r.hits.uncached[ok]
    extra_steps = np.ceil(uncached / max(r.batched_tokens, 1)) - 1
    rows = np.column_stack([np.ones(ok.sum()), uncached, r.hits.host[ok], decoding.astype(float)])
    return rows, t - extra_steps * step_s, ~ahead.any(axis=1)


def fit_costs(measured: Sequence[Replay]) -> EngineCosts:
    """The costs over every measured replay given (each with its own configuration's cache hits)."""
    if sum(int(r.times.ok.sum()) for r in measured) < 2:
        raise ValueError("at least 2 measured requests are needed to fit the engine's costs")
    decode = [_decode_rows(r) for r in measured]
    dx, dy = np.vstack([d[0] for d in decode]), np.concatenate([d[1] for d in decode])
    step, per_seq = (
        _nonnegative_fit(dx, dy)[:2] if len(dy) >= 3 else (float(np.mean(dy)) if len(dy) else 0.0, 0.0)
    )
    prefill_rows = [_prefill_rows(r, float(step)) for r in measured]
    x = np.vstack([p[0] for p in prefill_rows])
    y = np.concatenate([p[1] for p in prefill_rows])
    solo = np.concatenate([p[2] for p in prefill_rows])
    idle = solo & (x[:, 3] == 0)  # nothing decoding either: no step in flight to wait for
    if idle.sum() >= _MIN_ALONE:
        x, y = x[idle], y[idle]
    elif solo.sum() >= _MIN_ALONE:
        x, y = x[solo], y[solo]
    has_host = bool(x[:, 2].any())
    prefill = _nonnegative_fit(x, y)
    return EngineCosts(
        overhead_s=float(prefill[0]),
        prefill_s_per_token=float(prefill[1]),
        decode_slowdown_s=float(prefill[3]),
        step_s=float(step),
        step_s_per_seq=float(per_seq),
        host_s_per_token=float(prefill[2]) if has_host else None,
        requests=int(sum(int(r.times.ok.sum()) for r in measured)),
    )
