"""vLLM 0.26 (the GPU build used on the H200) prints the KV capacity on two lines."""

from __future__ import annotations

from autotune.engine._logscan import parse_kv_capacity

LOG_026 = """\
(EngineCore_DP0 pid=812) INFO 11-29 12:01:02 [kv_cache_utils.py:2177] GPU KV cache size: 56,432 tokens
(EngineCore_DP0 pid=812) INFO 11-29 12:01:02 [kv_cache_utils.py:2178] Maximum concurrency for 8,192 tokens per request: 6.89x
"""


def test_two_line_capacity_of_vllm_026_is_read() -> None:
    kv = parse_kv_capacity(LOG_026)
    assert kv is not None
    assert (kv.device, kv.tokens, kv.max_model_len, kv.max_concurrency) == ("GPU", 56432, 8192, 6.89)


def test_size_line_without_concurrency_still_gives_tokens() -> None:
    kv = parse_kv_capacity("GPU KV cache size: 1,024 tokens\n")
    assert kv is not None and kv.tokens == 1024 and kv.max_concurrency == 0.0
