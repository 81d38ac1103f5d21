"""Synthetic measured replays with known engine costs: the model's own simulation produces them, so
a fit must recover the costs that made them."""

from __future__ import annotations

import numpy as np

from autotune.predict import (
    Candidate,
    EngineCosts,
    KvCache,
    MeasuredTrial,
    RequestTimes,
    WorkloadShape,
    chains_of,
    simulate,
)

TRUE = EngineCosts(
    overhead_s=0.004, prefill_s_per_token=20e-6, decode_slowdown_s=0.0, step_s=0.002, step_s_per_seq=0.0005
)


def shape(
    n: int = 200, seed: int = 0, gap_s: float = 0.08, docs: int = 6, doc_tokens: tuple[int, int] = (200, 500)
) -> WorkloadShape:
    """RAG-like prompts (one of ``docs`` shared documents, then a question) at Poisson arrivals."""
    rng = np.random.default_rng(seed)
    documents = [
        tuple(int(x) for x in rng.integers(0, 30_000, size=int(rng.integers(*doc_tokens))))
        for _ in range(docs)
    ]
    prompts = tuple(
        documents[int(rng.integers(docs))]
        + tuple(int(x) for x in rng.integers(0, 30_000, size=int(rng.integers(10, 80))))
        for _ in range(n)
    )
    return WorkloadShape(
        ids=tuple(f"r{i}" for i in range(n)),
        prompts=prompts,
        arrivals=np.cumsum(rng.exponential(gap_s, size=n)),
        outputs=np.full(n, 40.0),
    )


def candidate(
    kv: int = 100_000, block: int = 32, batched: int = 2048, seqs: int = 128, **kw: object
) -> Candidate:
    return Candidate(f"kv={kv} block={block} batched={batched} seqs={seqs}", kv, block, batched, seqs, **kw)  # type: ignore[arg-type]


def measured(
    s: WorkloadShape, c: Candidate, costs: EngineCosts = TRUE, noise: float = 0.0, seed: int = 1
) -> MeasuredTrial:
    """What a replay of ``s`` on ``c`` would measure if the engine cost exactly ``costs`` (plus a
    relative noise of ``noise`` on every time)."""
    cache = KvCache(
        chains_of(s.prompts, c.block_size),
        s.outputs,
        c.gpu_kv_tokens // c.block_size,
        c.pool_tokens // c.block_size,
        caching=c.caching,
    )
    sim = simulate(s.arrivals, s.outputs, cache, costs, c.limits)
    rng = np.random.default_rng(seed)
    jitter = 1 + noise * rng.standard_normal(len(s.arrivals))
    ttft = sim.ttft * jitter
    times = RequestTimes(
        sent=s.arrivals.copy(),
        ttft=ttft,
        latency=ttft + sim.tpot * (s.outputs - 1) * jitter,
        output_tokens=s.outputs.copy(),
    )
    return MeasuredTrial(c, (times,))
