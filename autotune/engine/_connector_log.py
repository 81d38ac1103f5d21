"""What a KV connector says it served, read from its own log lines (LMCache's, through vLLM's
``LMCacheConnectorV1``): the host-tier figure of the ``cuda-lmcache`` profile comes from LMCache
itself, next to vLLM's prefix-cache counters.

LMCache logs one line per lookup of a request (``lmcache/integration/vllm/vllm_v1_adapter.py``,
``get_num_new_matched_tokens``; 0.4 and 0.5)::

    Reqid: cmpl-67...-0, Total tokens 6049, LMCache hit tokens: 6016, need to load: 1920
    Reqid: cmpl-67...-0, Total tokens 6049, Inference Engine computed tokens: 4096, LMCache hit tokens: 6016, need to load: 1920

``LMCache hit tokens`` is the prefix LMCache holds, ``need to load`` what it must bring back
beyond what vLLM's own prefix cache already computed (what the host tier saved from a
recompute). A request looked up twice (it waited for KV space) counts once: its last line.
Later releases (the 0.5 line after 0.5.3, with ``min_retrieve_tokens``) log a hit they do not
load as ``LMCache hit tokens: 640, but need to load: 128 < min_retrieve 256, skip retrieve ...``:
held, not loaded (0 loaded). 0.5.3, measured with vLLM 0.26.0 on the H200, logs the first form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ConnectorHits", "connector_hits"]

_LOOKUP = re.compile(
    r"Reqid: (?P<req>[^,\s]+), Total tokens (?P<total>\d+), "
    r"(?:Inference Engine computed tokens: (?P<computed>\d+), )?"
    r"LMCache hit tokens: (?P<hit>\d+|None), (?P<skip>but )?need to load: (?P<load>-?\d+)"
)


@dataclass(frozen=True)
class ConnectorHits:
    """Sums over the requests LMCache looked up in a stretch of its log."""

    requests: int
    prompt_tokens: int
    hit_tokens: int  # the prefix LMCache holds (the GPU's share included)
    load_tokens: int  # brought back from LMCache's tiers: recompute saved by the host pool

    @property
    def load_share(self) -> float | None:
        """Share of the prompt tokens LMCache loaded (the host tier's hit rate, by LMCache)."""
        return self.load_tokens / self.prompt_tokens if self.prompt_tokens else None

    def as_metrics(self) -> dict[str, float | None]:
        return {
            "lmcache_requests": float(self.requests),
            "lmcache_prompt_tokens": float(self.prompt_tokens),
            "lmcache_hit_tokens": float(self.hit_tokens),
            "lmcache_load_tokens": float(self.load_tokens),
            "lmcache_load_share": self.load_share,
        }

    def describe(self) -> str:
        share = self.load_share
        return (
            f"LMCache's log: {self.requests} requests looked up, {self.hit_tokens:,} of {self.prompt_tokens:,} "
            f"prompt tokens held, {self.load_tokens:,} loaded"
            + (f" ({share:.1%} of the prompt tokens)" if share is not None else "")
        )


def connector_hits(log_text: str) -> ConnectorHits | None:
    """The lookups in ``log_text`` (None: the log holds none, e.g. another connector)."""
    last: dict[str, tuple[int, int, int]] = {}
    for m in _LOOKUP.finditer(log_text):
        hit = 0 if m["hit"] == "None" else int(m["hit"])
        loaded = 0 if m["skip"] else max(0, int(m["load"]))  # "but need to load: N < min_retrieve": skipped
        last[m["req"]] = (int(m["total"]), hit, loaded)
    if not last:
        return None
    rows = last.values()
    return ConnectorHits(
        requests=len(last),
        prompt_tokens=sum(r[0] for r in rows),
        hit_tokens=sum(r[1] for r in rows),
        load_tokens=sum(r[2] for r in rows),
    )
