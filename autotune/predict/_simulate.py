"""The replay's arrivals through one engine, step by step, at the fitted costs: a small
discrete-event model of vLLM's scheduler (continuous batching with chunked prefill).

Each step runs every request already decoding (one token each) and, with the rest of the step's
token budget (``max_num_batched_tokens``), the prefill chunks of the running requests in arrival
order. A request is admitted from the queue while fewer than ``max_num_seqs`` run and its blocks fit
the KV cache beside theirs (:class:`~autotune.predict.KvCache`; no preemption); what the cache holds
of its prefix then is not computed. A step costs ``step_s + step_s_per_seq x decoding +
prefill_s_per_token x prefill tokens + host_s_per_token x tokens loaded from a pool``. A request's
first token comes with the step that ends its prefill; TTFT adds the fitted overhead outside the
engine's steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from autotune.predict._costs import EngineCosts
from autotune.predict._kv import KvCache

__all__ = ["EngineLimits", "Simulated", "simulate"]


@dataclass(frozen=True)
class EngineLimits:
    """What bounds a step and the running set: token budget and request count."""

    batched_tokens: int
    max_seqs: int


@dataclass(frozen=True)
class Simulated:
    """Per request (workload order): time to first token and per output token (s; NaN for
    single-token answers), and the prompt tokens the GPU cache and the host pool served it."""

    ttft: np.ndarray
    tpot: np.ndarray
    gpu_hits: np.ndarray
    host_hits: np.ndarray


@dataclass
class _Running:
    index: int
    prefill: int  # tokens left to compute
    outputs: int  # tokens left to emit
    host: int  # tokens to load from the pool with its first chunk


def simulate(
    arrivals: np.ndarray, outputs: np.ndarray, cache: KvCache, costs: EngineCosts, limits: EngineLimits
) -> Simulated:
    sim = _Simulation(arrivals, outputs, cache, costs, limits)
    sim.run()
    overhead = max(costs.overhead_s - costs.step_s, 0.0)
    steps = np.maximum(outputs - 1, 1)
    tpot = np.where(outputs > 1, (sim.last - sim.first) / steps, np.nan)
    return Simulated(
        ttft=sim.first - arrivals + overhead, tpot=tpot, gpu_hits=sim.gpu_hits, host_hits=sim.host_hits
    )


class _Simulation:
    """The scheduler's state between steps: the clock, the queue, the running set, and per request
    its first and last token times and the hits it was admitted with."""

    def __init__(
        self,
        arrivals: np.ndarray,
        outputs: np.ndarray,
        cache: KvCache,
        costs: EngineCosts,
        limits: EngineLimits,
    ) -> None:
        n = len(arrivals)
        self.arrivals, self.outputs, self.cache, self.costs, self.limits = (
            arrivals,
            outputs,
            cache,
            costs,
            limits,
        )
        self.order = np.argsort(arrivals, kind="stable")
        self.first, self.last = np.full(n, np.nan), np.full(n, np.nan)
        self.gpu_hits, self.host_hits = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.waiting: deque[int] = deque()
        self.running: list[_Running] = []
        self.t, self.next = 0.0, 0

    def run(self) -> None:
        n = len(self.arrivals)
        while self.next < n or self.waiting or self.running:
            self._arrive()
            if not self.waiting and not self.running:
                self.t = float(self.arrivals[self.order[self.next]])
                continue
            self._admit()
            self._step()

    def _arrive(self) -> None:
        n = len(self.arrivals)
        while self.next < n and self.arrivals[self.order[self.next]] <= self.t:
            self.waiting.append(int(self.order[self.next]))
            self.next += 1

    def _admit(self) -> None:
        prompt = self.cache.chains.prompt
        while self.waiting and len(self.running) < self.limits.max_seqs:
            i = self.waiting[0]
            hit = self.cache.admit(i, force=not self.running)
            if hit is None:
                return
            self.waiting.popleft()
            self.gpu_hits[i], self.host_hits[i] = hit
            computed = max(int(prompt[i]) - hit[0] - hit[1], 1)
            self.running.append(_Running(i, computed, max(int(self.outputs[i]), 1), hit[1]))

    def _chunks(self, budget: int) -> tuple[list[tuple[_Running, int]], int]:
        """The prefill chunks of this step, in arrival order within the budget left after decoding,
        and the tokens they load from the host pool (with each request's first chunk)."""
        chunks: list[tuple[_Running, int]] = []
        loaded = 0
        for r in self.running:
            if r.prefill > 0 and budget > 0:
                c = min(r.prefill, budget)
                budget -= c
                chunks.append((r, c))
                loaded += r.host
                r.host = 0
        return chunks, loaded

    def _step(self) -> None:
        costs = self.costs
        decoding = [r for r in self.running if r.prefill == 0]
        chunks, loaded = self._chunks(self.limits.batched_tokens - len(decoding))
        self.t += (
            costs.step_s
            + costs.step_s_per_seq * len(decoding)
            + costs.prefill_s_per_token * sum(c for _, c in chunks)
            + (costs.host_s_per_token or 0.0) * loaded
        )
        for r in decoding:
            r.outputs -= 1
        for r, c in chunks:
            r.prefill -= c
            if r.prefill == 0:
                self.first[r.index] = self.t
                r.outputs -= 1
        for r in [r for r in self.running if r.outputs <= 0]:
            self.last[r.index] = self.t
            self.cache.release(r.index)
            self.running.remove(r)
