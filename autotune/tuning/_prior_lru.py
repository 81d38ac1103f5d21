"""The prior's LRU model of vLLM's prefix cache over the workload's block chains."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Chains", "chains_of", "lru_hit_share"]


@dataclass(frozen=True)
class Chains:
    """Each request's block chain keys (prefix order) and how many of its blocks may hit."""

    block_size: int
    requests: tuple[tuple[tuple[int, ...], int], ...]
    prompt_tokens: int
    distinct: int


def chains_of(prompts: Sequence[Sequence[int]], block_size: int) -> Chains:
    out: list[tuple[tuple[int, ...], int]] = []
    seen: set[int] = set()
    for ids in prompts:
        chain, keys = 0, []
        for b in range(len(ids) // block_size):
            chain = hash((chain, tuple(ids[b * block_size : (b + 1) * block_size])))
            keys.append(chain)
        seen.update(keys)
        out.append((tuple(keys), max(len(ids) - 1, 0) // block_size))
    return Chains(block_size, tuple(out), sum(len(p) for p in prompts), len(seen))


def lru_hit_share(chains: Chains, capacity_tokens: int) -> float:
    """Share of prompt tokens an LRU prefix cache of ``capacity_tokens`` serves (requests one at a time)."""
    if not chains.prompt_tokens:
        return 0.0
    capacity = capacity_tokens // chains.block_size
    cache: OrderedDict[int, None] = OrderedDict()
    unlimited = capacity >= chains.distinct
    hits = 0
    for keys, hittable in chains.requests:
        for b in range(hittable):
            if keys[b] in cache:
                hits += 1
            else:
                break  # a chain misses from its first missing block on
        for key in reversed(keys):  # tail first: the shared head ends most recently used
            cache[key] = None
            cache.move_to_end(key)
        if not unlimited:
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hits * chains.block_size / chains.prompt_tokens
