"""The replay's arrivals through one engine, step by step, at the fitted costs: a small
discrete-event model of vLLM's scheduler (continuous batching with chunked prefill).

Each step runs every request already decoding (one token each) and, with the rest of the step's
token budget (``max_num_batched_tokens``), the prefill chunks of the running requests in arrival
order. A request is admitted from the queue while fewer than ``max_num_seqs`` run and its prompt
and output fit the KV cache beside theirs (no preemption). A step costs ``step_s + step_s_per_seq x
decoding + prefill_s_per_token x prefill tokens + host_s_per_token x tokens loaded from a pool``.
A request's first token comes with the step that ends its prefill; TTFT adds the fitted overhead
outside the engine's steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from autotune.predict._costs import EngineCosts

__all__ = ["EngineLimits", "Simulated", "simulate"]


@dataclass(frozen=True)
class EngineLimits:
    """What bounds a step and the running set: token budget, request count, KV tokens."""

    batched_tokens: int
    max_seqs: int
    kv_tokens: int


@dataclass(frozen=True)
class Simulated:
    """Per request (workload order), seconds: time to first token and time per output token (NaN
    for single-token answers)."""

    ttft: np.ndarray
    tpot: np.ndarray


@dataclass
class _Running:
    index: int
    prefill: int  # tokens left to compute
    outputs: int  # tokens left to emit
    host: int  # tokens to load from the pool with its first chunk
    kv: int


def simulate(
    arrivals: np.ndarray,
    prompt: np.ndarray,
    uncached: np.ndarray,
    host: np.ndarray,
    outputs: np.ndarray,
    costs: EngineCosts,
    limits: EngineLimits,
) -> Simulated:
    n = len(arrivals)
    order = np.argsort(arrivals, kind="stable")
    host_cost = costs.host_s_per_token or 0.0
    first, last = np.full(n, np.nan), np.full(n, np.nan)
    waiting: deque[int] = deque()
    running: list[_Running] = []
    t, nxt, kv_used = 0.0, 0, 0
    while nxt < n or waiting or running:
        while nxt < n and arrivals[order[nxt]] <= t:
            waiting.append(int(order[nxt]))
            nxt += 1
        if not waiting and not running:
            t = float(arrivals[order[nxt]])
            continue
        while waiting and len(running) < limits.max_seqs:
            i = waiting[0]
            need = int(prompt[i] + outputs[i])
            if running and kv_used + need > limits.kv_tokens:
                break
            waiting.popleft()
            running.append(_Running(i, int(uncached[i]), max(int(outputs[i]), 1), int(host[i]), need))
            kv_used += need
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
            kv_used -= r.kv
            running.remove(r)
    overhead = max(costs.overhead_s - costs.step_s, 0.0)
    steps = np.maximum(outputs - 1, 1)
    tpot = np.where(outputs > 1, (last - first) / steps, np.nan)
    return Simulated(ttft=first - arrivals + overhead, tpot=tpot)
