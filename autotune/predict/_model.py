"""The calibrated model of a study: the cache replay (which prompt tokens each configuration's KV
cache serves), the fitted engine costs and the arrivals' simulation, giving any candidate
configuration its TTFT p50/p90 and TPOT p50 with an interval from the model's own measured error.

Capacity at an SLO: :meth:`LatencyModel.capacity_at` bisects the arrivals' density factor
(:meth:`LatencyModel.predict_at`, the same simulation with the arrivals compressed) for the highest
load whose predicted p90 TTFT meets a limit; other SLO metrics are not wired yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.predict._costs import EngineCosts, Replay, RequestTimes, fit_costs
from autotune.predict._kv import Chains, KvCache, chains_of, replayed_hits
from autotune.predict._ledger import Interval, Ledger, interval_for
from autotune.predict._refine import RefitRun, refine_costs
from autotune.predict._simulate import EngineLimits, simulate

__all__ = ["Candidate", "LatencyModel", "MeasuredTrial", "Prediction", "WorkloadShape"]

REFIT_TRIALS = 12  # the refinement simulates the baseline and the latest trials measured
REFIT_PASSES = 2  # and the first passes of each
SCALE_LIMITS = (0.8, 1.25)  # the in-sample correction of TTFT p50/p90, at most this far from 1


@dataclass(frozen=True)
class Candidate:
    """A configuration as the model sees it: its KV capacity (GPU tokens, block, host-pool tokens),
    whether prefix caching is on, and the scheduler's two limits."""

    label: str
    gpu_kv_tokens: int
    block_size: int
    batched_tokens: int
    max_seqs: int
    pool_tokens: int = 0
    caching: bool = True

    @property
    def limits(self) -> EngineLimits:
        return EngineLimits(self.batched_tokens, self.max_seqs)


@dataclass(frozen=True)
class WorkloadShape:
    """The workload as replayed: request ids, prompt token ids, planned arrival offsets (s) and
    output tokens, in workload order."""

    ids: tuple[str, ...]
    prompts: tuple[tuple[int, ...], ...]
    arrivals: np.ndarray
    outputs: np.ndarray


@dataclass(frozen=True)
class MeasuredTrial:
    """A configuration as measured: one :class:`RequestTimes` per replay on its engine (a trial's
    passes, the prefix cache emptied between them)."""

    candidate: Candidate
    passes: tuple[RequestTimes, ...]

    def median(self, figure: Callable[[RequestTimes], float]) -> float:
        """A figure as the trial reports it: the median over its passes."""
        return float(np.median([figure(p) for p in self.passes])) if self.passes else float("nan")

    def ttft_p90_ms(self) -> float:
        return self.median(lambda p: p.ttft_ms(90))


@dataclass(frozen=True)
class Prediction:
    """Predicted figures (ms) of one candidate; ``basis`` says what they were computed from."""

    candidate: Candidate
    ttft_p50_ms: float
    ttft_p90_ms: float
    tpot_p50_ms: float
    interval: Interval  # of the p90 TTFT
    hit_gpu: float  # share of prompt tokens served, under the simulated load
    hit_host: float
    basis: str

    def as_dict(self) -> dict[str, Any]:
        """The figures as a trial would store them next to its measurement (JSON types)."""
        return {
            "ttft_p50_ms": self.ttft_p50_ms,
            "ttft_p90_ms": self.ttft_p90_ms,
            "tpot_p50_ms": self.tpot_p50_ms,
            "interval_ms": [self.interval.low, self.interval.high],
            "interval_errors": self.interval.errors,
            "veto_allowed": self.interval.veto_allowed,
            "hit_gpu": self.hit_gpu,
            "hit_host": self.hit_host,
            "basis": self.basis,
        }

    def line(self) -> str:
        hits = f"prefix hits {self.hit_gpu:.1%}" + (f" + {self.hit_host:.1%} host" if self.hit_host else "")
        return (
            f"{self.candidate.label}: predicted TTFT p50 {self.ttft_p50_ms:.1f} ms, p90 {self.ttft_p90_ms:.1f} ms "
            f"(interval {self.interval.describe()}), TPOT p50 {self.tpot_p50_ms:.2f} ms; {hits}"
        )


@dataclass
class LatencyModel:
    """Fit on measured trials (:meth:`fit`), predict any candidate (:meth:`predict`); the ledger's
    errors set every prediction's interval."""

    shape: WorkloadShape
    costs: EngineCosts | None = None
    ledger: Ledger = field(default_factory=Ledger)
    fitted_on: int = 0  # trials
    # measured / simulated TTFT p50 and p90 of the fitted trials themselves (their median): what the
    # simulation misses on this machine everywhere (the tail's jitter, the HTTP path), applied to
    # every prediction
    scale_p50: float = 1.0
    scale_p90: float = 1.0
    _chains: dict[int, Chains] = field(default_factory=dict)

    def cache(self, c: Candidate) -> KvCache:
        """An empty KV cache of candidate ``c`` over the workload's prompts."""
        if c.block_size not in self._chains:
            self._chains[c.block_size] = chains_of(self.shape.prompts, c.block_size)
        blocks = c.gpu_kv_tokens // c.block_size
        return KvCache(
            self._chains[c.block_size],
            self.shape.outputs,
            blocks,
            c.pool_tokens // c.block_size,
            caching=c.caching,
        )

    def fit(self, measured: Sequence[MeasuredTrial]) -> EngineCosts:
        """Refit the costs on every trial measured so far; each request's cache hits are its own
        configuration's cache replayed over the measured run (requests holding their blocks from
        send to last token). The linear fit is then refined through the simulation of the measured
        replays (:func:`~autotune.predict._refine.refine_costs`)."""
        if not measured:
            raise ValueError("no measured trial to fit the model on")
        replays = []
        for m in measured:
            for t in m.passes:  # each pass starts from an emptied cache
                hits = replayed_hits(self.cache(m.candidate), t.sent, t.sent + t.latency)
                replays.append(Replay(t, hits, m.candidate.batched_tokens))
        runs = [
            RefitRun(
                np.where(np.isfinite(t.sent), t.sent, self.shape.arrivals),
                self.shape.outputs,
                lambda c=m.candidate: self.cache(c),  # type: ignore[misc]
                m.candidate.limits,
                t.ttft,
            )
            for m in [*measured[:1], *measured[1:][-(REFIT_TRIALS - 1) :]]
            for t in m.passes[:REFIT_PASSES]
        ]
        self.costs = refine_costs(fit_costs(replays), runs)
        self.fitted_on = len(measured)
        self.scale_p50, self.scale_p90 = 1.0, 1.0
        own = [(self.predict(m.candidate), m) for m in measured]
        self.scale_p50 = _median_ratio([(m.median(lambda p: p.ttft_ms(50)), p.ttft_p50_ms) for p, m in own])
        self.scale_p90 = _median_ratio([(m.ttft_p90_ms(), p.ttft_p90_ms) for p, m in own])
        return self.costs

    def predict(self, candidate: Candidate) -> Prediction:
        """The candidate's figures at the workload's own arrivals."""
        return self.predict_at(candidate, 1.0)

    def predict_at(self, candidate: Candidate, load: float) -> Prediction:
        """The prediction with the arrivals ``load`` times as dense (1: the workload as replayed)."""
        if self.costs is None:
            raise ValueError("the model is not fitted: call fit() on a measured trial first")
        cache = self.cache(candidate)
        sim = simulate(self.shape.arrivals / load, self.shape.outputs, cache, self.costs, candidate.limits)
        ttft = sim.ttft * 1000.0
        tpot = sim.tpot[np.isfinite(sim.tpot)] * 1000.0
        p90 = float(np.percentile(ttft, 90)) * self.scale_p90
        total = float(cache.chains.prompt.sum()) or 1.0
        gpu, host = float(sim.gpu_hits.sum()) / total, float(sim.host_hits.sum()) / total
        errors = self.ledger.errors
        basis = (
            f"costs fitted on {self.costs.requests} requests of {self.fitted_on} measured trial(s); "
            f"interval from {len(errors)} measured error(s); TTFT x{self.scale_p50:.2f} (p50), "
            f"x{self.scale_p90:.2f} (p90) as the fitted trials measured"
            + ("" if candidate.pool_tokens == 0 or self.costs.host_s_per_token is not None
               else "; host-pool loads not measured yet: counted as free")
        )  # fmt: skip
        return Prediction(
            candidate=candidate,
            ttft_p50_ms=float(np.percentile(ttft, 50)) * self.scale_p50,
            ttft_p90_ms=p90,
            tpot_p50_ms=float(np.median(tpot)) if len(tpot) else float("nan"),
            interval=interval_for(p90, errors),
            hit_gpu=gpu,
            hit_host=host,
            basis=basis,
        )

    def capacity_at(
        self,
        candidate: Candidate,
        ttft_p90_ms: float,
        *,
        low: float = 0.125,
        high: float = 32.0,
        steps: int = 10,
    ) -> float | None:
        """The densest arrivals (a factor on the workload's own; bisected in ``steps`` on a log
        scale) at which the predicted p90 TTFT stays within ``ttft_p90_ms``; None when even ``low``
        breaks it, ``high`` when ``high`` holds. The SLO capacity's seam: one metric for now."""

        def holds(load: float) -> bool:
            return self.predict_at(candidate, load).ttft_p90_ms <= ttft_p90_ms

        if not holds(low):
            return None
        if holds(high):
            return high
        for _ in range(steps):
            mid = float(np.sqrt(low * high))
            low, high = (mid, high) if holds(mid) else (low, mid)
        return low

    def rank(self, candidates: Sequence[Candidate], top: int | None = None) -> list[Prediction]:
        """Candidates by predicted p90 TTFT, best first."""
        out = sorted((self.predict(c) for c in candidates), key=lambda p: p.ttft_p90_ms)
        return out if top is None else out[:top]


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float:
    """The median of measured / predicted over the pairs with both finite and > 0 (1: none), within
    :data:`SCALE_LIMITS`: a correction of the tail, never a replacement of the costs."""
    ratios = [m / p for m, p in pairs if np.isfinite(m) and np.isfinite(p) and m > 0 and p > 0]
    lo, hi = SCALE_LIMITS
    return float(np.clip(np.median(ratios), lo, hi)) if ratios else 1.0
