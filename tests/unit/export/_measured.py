"""A study of one measured trial and its baseline, as `autotune run` stores them, for the export tests.

The stored commands use the API server's module (not ``vllm serve``), so the deploy line is the same
wherever the tests run (see ``runnable_launcher``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.study import TrialRecord, TrialStatus
from autotune.study._record import Figures

LAUNCHER = ("/usr/bin/python3", "-P", "-m", "vllm.entrypoints.openai.api_server")
MODEL = "Qwen/Qwen2.5-7B-Instruct"
# the cuda-native profile's rendering of a space's sample: vLLM's own CPU KV offload, 24 GiB
NATIVE_POOL = (
    "--max-model-len", "8192", "--gpu-memory-utilization", "0.92", "--max-num-seqs", "128",
    "--max-num-batched-tokens", "4096", "--block-size", "32", "--kv-cache-dtype", "fp8",
    "--kv-offloading-size", "24", "--kv-transfer-config",
    '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"block_size": 128}}',
)  # fmt: skip
# the cuda-lmcache profile's: LMCache's CPU pool, 8 GB per rank, over 2 tensor-parallel ranks
LMCACHE_POOL = (
    "--tensor-parallel-size", "2", "--no-enable-prefix-caching", "--enable-chunked-prefill",
    "--kv-transfer-config",
    '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", "kv_connector_extra_config": '
    '{"lmcache.local_cpu": true, "lmcache.max_local_cpu_size": 8, "lmcache.chunk_size": 256}}',
)  # fmt: skip


def measured_study(
    flags: Sequence[str] = NATIVE_POOL,
    *,
    env: Mapping[str, str] | None = None,
    engine: str = "vllm 0.32.0 (cuda build)",
    memory: Mapping[str, Any] | None = None,
    storage: str | None = None,
) -> optuna.Study:
    """Study ``chat``: the baseline (trial 0, 900 ms) and ``flags`` (trial 1, 420 ms, the best)."""
    st = optuna.create_study(direction="minimize", study_name="chat", storage=storage)
    st.set_user_attr("objective", "ttft_p90")
    for value, baseline, fl in ((900.0, True, ("--max-model-len", "8192")), (420.0, False, tuple(flags))):
        figures = {
            "completed": 48,
            "failed": 0,
            "output_throughput": 612.5,
            "percentiles_ms": {"ttft_p90": value},
        }
        rec = TrialRecord(
            status=TrialStatus.OK,
            command=(*LAUNCHER, "--model", MODEL, "--host", "127.0.0.1", "--port", "8123", *fl),
            rendered_env={} if baseline else dict(env or {}),
            figures=Figures(figures),
            baseline=baseline,
            engine=engine,
            memory={} if baseline else dict(memory or {}),
            constraints=(-1.0,),
        )
        st.add_trial(
            optuna.trial.create_trial(value=value, params={}, distributions={}, user_attrs=rec.to_attrs())
        )
    return st
