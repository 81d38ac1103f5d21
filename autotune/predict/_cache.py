"""Which prompt tokens of each request a configuration's KV cache serves with requests one at a time:
the prior's LRU replay (:mod:`autotune.tuning._prior_lru`: block chains, touched tail first), per
request and per tier. Under load running requests pin blocks: :class:`~autotune.predict.KvCache`.

The GPU tier is an LRU of ``gpu_tokens`` (empty when prefix caching is off); a host pool is a
write-through LRU of ``pool_tokens`` that serves a block the GPU tier lost. A chain hits from its
first block until its first block in neither tier; the last prompt token is always computed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from autotune.predict._kv import TierHits, chains_of

__all__ = ["tier_hits"]


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
    chains = chains_of(prompts, block_size)
    n = len(prompts)
    g, h = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for i, keys in enumerate(chains.keys):
        for key in keys[: chains.hittable[i]]:
            if key in gpu:
                g[i] += block_size
            elif key in pool:
                h[i] += block_size
            else:
                break
        gpu.touch(keys)
        pool.touch(keys)
    return TierHits(chains.prompt.copy(), g, h)
