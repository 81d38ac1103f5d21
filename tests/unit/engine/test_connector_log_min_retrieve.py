"""LMCache's lookup line for a hit it does not load (``min_retrieve_tokens``): held, 0 loaded."""

from __future__ import annotations

from autotune.engine import connector_hits

LOG = (
    "INFO 12-02 05:01:02 [vllm_v1_adapter.py:1201] Reqid: cmpl-a-0, Total tokens 1000, Inference Engine "
    "computed tokens: 512, LMCache hit tokens: 640, but need to load: 128 < min_retrieve 256, skip retrieve "
    "but record for save skip\n"
    "INFO 12-02 05:01:02 [vllm_v1_adapter.py:1212] Reqid: cmpl-b-0, Total tokens 2000, Inference Engine "
    "computed tokens: 0, LMCache hit tokens: 1536, need to load: 1536\n"
)


def test_a_hit_below_min_retrieve_is_held_but_not_counted_as_loaded() -> None:
    hits = connector_hits(LOG)
    assert hits is not None
    assert (hits.requests, hits.prompt_tokens, hits.hit_tokens, hits.load_tokens) == (2, 3000, 2176, 1536)
