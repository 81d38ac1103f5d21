"""Which prompt tokens of each request a configuration's KV cache serves: the prior's LRU replay
(:mod:`autotune.tuning._prior_lru`: block chains, touched tail first), per request and per tier.

The GPU tier is an LRU of ``gpu_tokens`` (empty when prefix caching is off); a host pool is a
write-through LRU of ``pool_tokens`` that serves a block the GPU tier lost. A chain hits from its
first block until its first block in neither tier; the last prompt token is always computed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["TierHits", "tier_hits"]


@dataclass(frozen=True)
class TierHits:
    """Per request (workload order): prompt tokens, tokens served by the GPU tier and by the host pool."""

    prompt: np.ndarray
    gpu: np.ndarray
    host: np.ndarray

    @property
    def uncached(self) -> np.ndarray:
        """Prompt tokens the engine computes (at least one per request)."""
        return np.asarray(np.maximum(self.prompt - self.gpu - self.host, 1))

    def share(self) -> tuple[float, float]:
        """(GPU, host) hit share of all prompt tokens."""
        total = float(self.prompt.sum()) or 1.0
        return float(self.gpu.sum()) / total, float(self.host.sum()) / total


class _Tier:
    def __init__(self, blocks: int) -> None:
        self.blocks = blocks
        self.keys: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: int) -> bool:
        return key in self.keys

    def touch(self, chain: Sequence[int]) -> None:
        if self.blocks <= 0:
            return
        for key in reversed(chain):  # tail first: the shared head ends most recently used
            self.keys[key] = None
            self.keys.move_to_end(key)
        while len(self.keys) > self.blocks:
            self.keys.popitem(last=False)


def _chain(ids: Sequence[int], block_size: int) -> list[int]:
    keys, link = [], 0
    for b in range(len(ids) // block_size):
        link = hash((link, tuple(ids[b * block_size : (b + 1) * block_size])))
        keys.append(link)
    return keys


def tier_hits(
    prompts: Sequence[Sequence[int]],
    block_size: int,
    gpu_tokens: int,
    pool_tokens: int = 0,
    *,
    caching: bool = True,
) -> TierHits:
    """Replay the prompts one at a time through both tiers (see the module's docstring)."""
    gpu = _Tier(gpu_tokens // block_size if caching else 0)
    pool = _Tier(pool_tokens // block_size)
    n = len(prompts)
    g, h = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for i, ids in enumerate(prompts):
        keys = _chain(ids, block_size)
        hittable = max(len(ids) - 1, 0) // block_size
        for key in keys[:hittable]:
            if key in gpu:
                g[i] += block_size
            elif key in pool:
                h[i] += block_size
            else:
                break
        gpu.touch(keys)
        pool.touch(keys)
    return TierHits(np.array([len(p) for p in prompts], dtype=np.int64), g, h)
