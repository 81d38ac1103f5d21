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
    n = len(arrivals)
    order = np.argsort(arrivals, kind="stable")
    prompt = cache.chains.prompt
    host_cost = costs.host_s_per_token or 0.0
    first, last = np.full(n, np.nan), np.full(n, np.nan)
    gpu_hits, host_hits = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    waiting: deque[int] = deque()
    running: list[_Running] = []
    t, nxt = 0.0, 0
    while nxt < n or waiting or running:
        while nxt < n and arrivals[order[nxt]] <= t:
            waiting.append(int(order[nxt]))
            nxt += 1
        if not waiting and not running:
            t = float(arrivals[order[nxt]])
            continue
        while waiting and len(running) < limits.max_seqs:
            i = waiting[0]
            hit = cache.admit(i, force=not running)
            if hit is None:
                break
            waiting.popleft()
            gpu_hits[i], host_hits[i] = hit
            computed = max(int(prompt[i]) - hit[0] - hit[1], 1)
            running.append(_Running(i, computed, max(int(outputs[i]), 1), hit[1]))
        budget = limits.batched_tokens
        decoding = [r for r in running if r.prefill == 0]
        budget -= len(decoding)
        chunks: list[tuple[_Running, int]] = []
        loaded = 0
        for r in running:
            if r.prefill > 0 and budget > 0:
                c = min(r.prefill, budget)
                budget -= c
                chunks.append((r, c))
                loaded += r.host
                r.host = 0
        t += (
            costs.step_s
            + costs.step_s_per_seq * len(decoding)
            + costs.prefill_s_per_token * sum(c for _, c in chunks)
            + host_cost * loaded
        )
        for r in decoding:
            r.outputs -= 1
        for r, c in chunks:
            r.prefill -= c
            if r.prefill == 0:
                first[r.index] = t
                r.outputs -= 1
        for r in [r for r in running if r.outputs <= 0]:
            last[r.index] = t
            cache.release(r.index)
            running.remove(r)
    overhead = max(costs.overhead_s - costs.step_s, 0.0)
    steps = np.maximum(outputs - 1, 1)
    tpot = np.where(outputs > 1, (last - first) / steps, np.nan)
    return Simulated(ttft=first - arrivals + overhead, tpot=tpot, gpu_hits=gpu_hits, host_hits=host_hits)
