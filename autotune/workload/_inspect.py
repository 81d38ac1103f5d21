"""What a workload looks like to the server: sizes, arrival rate, sessions and prefix-reuse potential.

Prefix reuse is computed the way vLLM's prefix cache sees prompts: each prompt's tokens are cut
into full blocks of ``block_size`` tokens, and block ``i`` is identified by a hash of every token
from the start of the prompt to the end of block ``i`` (a block chain). A block hits when the same
chain already appeared in an earlier request. Like vLLM, a partial last block never hits and the
last prompt token is always computed (so a fully cached prompt still misses its final block when
its length is a multiple of ``block_size``). With an unlimited cache, the hit share is an upper
bound of the prefix-cache hit rate; the distinct chains are the working set the cache must hold
to reach it. For chat requests whose assistant messages are placeholders, the real replay may
differ when the replayer substitutes the real outputs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from autotune.workload._model import Workload
from autotune.workload._tokens import PromptTokenizer, WordTokenizer

__all__ = ["LengthStats", "WorkloadReport", "inspect_workload", "prefix_reuse"]


@dataclass(frozen=True)
class LengthStats:
    """Distribution of a token count over requests."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int
    total: int

    @classmethod
    def of(cls, values: list[int]) -> LengthStats:
        arr = np.asarray(values, dtype=np.int64)
        if arr.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0, 0, 0)
        p50, p90, p99 = (float(x) for x in np.percentile(arr, [50, 90, 99]))
        return cls(float(arr.mean()), p50, p90, p99, int(arr.max()), int(arr.sum()))


@dataclass(frozen=True)
class PrefixReuse:
    hit_tokens: int  # prompt tokens in blocks whose chain appeared in an earlier request
    prompt_tokens: int
    distinct_blocks: int  # distinct block chains over the whole workload

    @property
    def share(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True)
class WorkloadReport:
    path: str
    requests: int
    chat_requests: int
    skipped_lines: int
    duration_s: float | None  # last minus first timestamp; None without timestamps
    mean_rate: float | None  # arrivals per second between the first and last timestamp
    prompt_tokens: LengthStats
    output_tokens: LengthStats  # max_tokens as requested
    max_sequence_tokens: int  # largest prompt + max_tokens: the smallest max-model-len that fits
    sessions: int  # distinct session ids (requests without one are not counted)
    turns_mean: float
    turns_max: int
    tokenizer: str
    tokens_exact: bool  # False when counted with the approximate word tokenizer
    block_size: int
    prefix_hit_tokens: int
    prefix_reuse: float  # share of prompt tokens that an unlimited prefix cache could serve
    distinct_blocks: int
    working_set_tokens: int  # distinct_blocks * block_size
    kv_bytes_per_token: int | None
    working_set_gib: float | None  # working set in KV cache memory, with kv_bytes_per_token

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def prefix_reuse(prompts: list[list[int]], block_size: int) -> PrefixReuse:
    """Block-chain prefix reuse over token-id prompts taken in order (see the module docstring)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    seen: set[int] = set()
    hits = 0
    for ids in prompts:
        chain = 0
        hittable = max(len(ids) - 1, 0) // block_size  # the last token is always computed
        new: list[int] = []
        for b in range(len(ids) // block_size):
            chain = hash((chain, tuple(ids[b * block_size : (b + 1) * block_size])))
            if b < hittable and chain in seen:
                hits += block_size
            new.append(chain)
        seen.update(new)
    return PrefixReuse(hit_tokens=hits, prompt_tokens=sum(map(len, prompts)), distinct_blocks=len(seen))


def inspect_workload(
    w: Workload,
    *,
    block_size: int = 16,
    tokenizer: PromptTokenizer | None = None,
    kv_bytes_per_token: int | None = None,
) -> WorkloadReport:
    """Summarize ``w``; token counts use ``tokenizer``, or approximate words when it is None."""
    tok: PromptTokenizer = tokenizer if tokenizer is not None else WordTokenizer()
    prompts = [tok.prompt_ids(r) for r in w.requests]
    prompt_lengths = [len(p) for p in prompts]
    outputs = [r.max_tokens for r in w.requests]
    reuse = prefix_reuse(prompts, block_size)

    duration = rate = None
    if w.has_timestamps:
        times = [r.timestamp for r in w.requests if r.timestamp is not None]
        duration = max(times) - min(times)
        rate = (len(times) - 1) / duration if duration > 0 else None
    turns = list(Counter(r.session_id for r in w.requests if r.session_id is not None).values())
    working_tokens = reuse.distinct_blocks * block_size
    return WorkloadReport(
        path=str(w.path),
        requests=len(w),
        chat_requests=sum(r.is_chat for r in w.requests),
        skipped_lines=len(w.skipped),
        duration_s=duration,
        mean_rate=rate,
        prompt_tokens=LengthStats.of(prompt_lengths),
        output_tokens=LengthStats.of(outputs),
        max_sequence_tokens=max(p + o for p, o in zip(prompt_lengths, outputs, strict=True)),
        sessions=len(turns),
        turns_mean=float(np.mean(turns)) if turns else 0.0,
        turns_max=max(turns, default=0),
        tokenizer=tok.name,
        tokens_exact=tok.is_exact,
        block_size=block_size,
        prefix_hit_tokens=reuse.hit_tokens,
        prefix_reuse=reuse.share,
        distinct_blocks=reuse.distinct_blocks,
        working_set_tokens=working_tokens,
        kv_bytes_per_token=kv_bytes_per_token,
        working_set_gib=working_tokens * kv_bytes_per_token / 2**30 if kv_bytes_per_token else None,
    )
