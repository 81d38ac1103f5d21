"""LMCache's own lookup lines (through vLLM's LMCacheConnectorV1) read into the host-tier figure."""

from __future__ import annotations

from autotune.engine import connector_hits

# The two shapes LMCache 0.4/0.5 print (lmcache/integration/vllm/vllm_v1_adapter.py), inside
# vLLM's engine-core log prefix.
LOG = """\
(EngineCore_DP0 pid=494270) [2025-09-30 01:12:36,500] LMCache INFO: Reqid: cmpl-a-0, Total tokens 6049, LMCache hit tokens: 0, need to load: 0 (vllm_v1_adapter.py:1178:lmcache)
(EngineCore_DP0 pid=494270) INFO 09-30 01:12:36 [core.py:1] unrelated line, Total tokens 12
(EngineCore_DP0 pid=494270) [2025-09-30 01:12:37,502] LMCache INFO: Reqid: cmpl-b-0, Total tokens 6049, Inference Engine computed tokens: 4096, LMCache hit tokens: 6016, need to load: 1920 (vllm_v1_adapter.py:1178:lmcache)
(EngineCore_DP0 pid=494270) [2025-09-30 01:12:37,600] LMCache INFO: Reqid: cmpl-c-0, Total tokens 100, LMCache hit tokens: None, need to load: 0
(EngineCore_DP0 pid=494270) [2025-09-30 01:12:37,700] LMCache INFO: Reqid: cmpl-b-0, Total tokens 6049, Inference Engine computed tokens: 5000, LMCache hit tokens: 6016, need to load: 1016
"""


def test_lookups_are_summed_once_per_request_the_last_line_winning() -> None:
    hits = connector_hits(LOG)
    assert hits is not None
    assert hits.requests == 3  # cmpl-b was looked up twice (it waited for KV space): counted once
    assert hits.prompt_tokens == 6049 + 6049 + 100
    assert hits.hit_tokens == 0 + 6016 + 0  # "None" is no hit
    assert hits.load_tokens == 1016  # cmpl-b's last lookup
    assert hits.load_share == 1016 / (6049 + 6049 + 100)
    assert hits.as_metrics()["lmcache_load_tokens"] == 1016.0
    assert "3 requests looked up" in hits.describe() and "1,016 loaded" in hits.describe()


def test_a_log_without_lmcache_lines_has_no_figure() -> None:
    assert (
        connector_hits("(APIServer pid=1) INFO 11-30 19:14:48 [api_server.py:677] Starting vLLM server")
        is None
    )
    assert connector_hits("") is None
