"""The KV cache while requests run: vLLM's block pool as the step simulation and the measured
replays see it.

The GPU holds ``gpu_blocks`` blocks. A running request holds its prompt's full blocks (shared with
every running request whose prompt has the same prefix) and its private ones (the prompt's partial
last block and its output); they are allocated when it is admitted. When it finishes, its full blocks
stay cached (evictable, least recently used first; the prompt's head freed last, so it ends most
recently used) until a new allocation needs the room. With prefix caching off nothing is shared or
kept. A write-through host pool of ``pool_blocks`` serves a prefix the GPU lost. This is the prior's
LRU (:func:`tier_hits`) with the blocks that running requests pin taken out of what the cache holds:
under load a small KV cache serves fewer hits than one request at a time would see.

Approximations: a request's output blocks are allocated at admission (vLLM allocates them as it
decodes), and a prefix another running request is still computing counts as a hit (vLLM caches a
block once computed): both matter only when requests sharing a prefix arrive within one prefill.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Chains", "KvCache", "TierHits", "chains_of", "replayed_hits"]


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


@dataclass(frozen=True)
class Chains:
    """Per request: its full prompt blocks' chain keys, how many of them may hit (the last prompt
    token is always computed), its prompt tokens; and the block size."""

    block_size: int
    keys: tuple[tuple[int, ...], ...]
    hittable: tuple[int, ...]
    prompt: np.ndarray


def chains_of(prompts: Sequence[Sequence[int]], block_size: int) -> Chains:
    keys: list[tuple[int, ...]] = []
    for ids in prompts:
        chain, link = [], 0
        for b in range(len(ids) // block_size):
            link = hash((link, tuple(ids[b * block_size : (b + 1) * block_size])))
            chain.append(link)
        keys.append(tuple(chain))
    return Chains(
        block_size,
        tuple(keys),
        tuple(max(len(p) - 1, 0) // block_size for p in prompts),
        np.array([len(p) for p in prompts], dtype=np.int64),
    )


class KvCache:
    def __init__(
        self,
        chains: Chains,
        outputs: np.ndarray,
        gpu_blocks: int,
        pool_blocks: int = 0,
        *,
        caching: bool = True,
    ) -> None:
        self.chains, self.caching = chains, caching
        self.capacity = gpu_blocks
        self.pool_blocks = pool_blocks
        bs = chains.block_size
        total = -(-(chains.prompt + outputs.astype(np.int64)) // bs)  # ceil: every block a request holds
        self.private = [int(t) - (len(k) if caching else 0) for t, k in zip(total, chains.keys, strict=True)]
        self.refs: dict[int, int] = {}  # full blocks held by running requests
        self.cached: OrderedDict[int, None] = OrderedDict()  # evictable, least recently used first
        self.pool: OrderedDict[int, None] = OrderedDict()
        self.held_private = 0

    @property
    def used(self) -> int:
        return len(self.refs) + self.held_private + len(self.cached)

    def _hits(self, i: int) -> tuple[int, int]:
        """(GPU, host) blocks of request ``i``'s prefix the cache serves now."""
        keys, gpu, host = self.chains.keys[i], 0, 0
        for key in keys[: self.chains.hittable[i]]:
            if self.caching and (key in self.refs or key in self.cached) and not host:
                gpu += 1
            elif key in self.pool:
                host += 1
            else:
                break
        return gpu, host

    def admit(self, i: int, *, force: bool = False) -> tuple[int, int] | None:
        """Allocate request ``i``'s blocks; its (GPU, host) hit tokens, or None when they do not fit
        (``force``: allocate anyway, over capacity if need be: a measured request was running)."""
        gpu, host = self._hits(i)
        keys = self.chains.keys[i] if self.caching else ()
        new = sum(1 for k in keys if k not in self.refs and k not in self.cached) + self.private[i]
        reused = sum(1 for k in keys if k in self.cached)  # cached blocks it takes back from eviction
        if len(self.refs) + self.held_private + reused + new > self.capacity and not force:
            return None
        for k in keys:
            if k in self.cached:
                del self.cached[k]
            self.refs[k] = self.refs.get(k, 0) + 1
        self.held_private += self.private[i]
        while self.cached and self.used > self.capacity:
            self.cached.popitem(last=False)
        if self.pool_blocks:
            for k in reversed(self.chains.keys[i]):  # write-through: every computed block kept
                self.pool[k] = None
                self.pool.move_to_end(k)
            while len(self.pool) > self.pool_blocks:
                self.pool.popitem(last=False)
        bs = self.chains.block_size
        return gpu * bs, host * bs

    def release(self, i: int) -> None:
        keys = self.chains.keys[i] if self.caching else ()
        self.held_private -= self.private[i]
        for k in reversed(keys):  # tail first: the shared head ends most recently used
            self.refs[k] -= 1
            if self.refs[k] == 0:
                del self.refs[k]
                self.cached[k] = None
                self.cached.move_to_end(k)
        while self.cached and self.used > self.capacity:
            self.cached.popitem(last=False)


def replayed_hits(cache: KvCache, start: np.ndarray, end: np.ndarray) -> TierHits:
    """What ``cache`` served each request of a measured replay: admitted when sent (``start``),
    released when its last token came (``end``); a failed request (NaN) holds nothing."""
    n = len(start)
    events = sorted(
        [(float(end[i]), 0, i) for i in range(n) if np.isfinite(end[i])]
        + [(float(start[i]), 1, i) for i in range(n) if np.isfinite(start[i]) and np.isfinite(end[i])]
    )  # at equal times a release comes before an admission
    gpu, host = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for _, kind, i in events:
        if kind:
            hit = cache.admit(i, force=True)
            assert hit is not None
            gpu[i], host[i] = hit
        else:
            cache.release(i)
    return TierHits(cache.chains.prompt.copy(), gpu, host)
