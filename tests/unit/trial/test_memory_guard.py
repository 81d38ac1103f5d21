"""The trial loop's memory seam: rendered commands -> estimator input; GPU memory released."""

from __future__ import annotations

from pathlib import Path

from autotune.engine._sizing import parse_size, sizing_from_argv
from autotune.memory import GiB, GpuMemory, GpuReading
from autotune.trial import MemoryGuard
from tests.unit.conftest import FakeProbe

TINY = Path(__file__).resolve().parents[2] / "data" / "model_configs" / "tiny-llama-2layer.json"


class DrainingGpu(FakeProbe):
    """A GPU whose memory drops by 10 GiB per reading, from 40 GiB to 0 (a process exiting)."""

    def gpus(self) -> GpuReading:
        self.swap_calls += 1
        used = max(0, 40 - 10 * self.swap_calls) * GiB
        return GpuReading(gpus=(GpuMemory(0, "H200", 140 * GiB, 140 * GiB - used, used),))


def _guard(tmp_path: Path, probe: FakeProbe) -> MemoryGuard:
    (tmp_path / "config.json").write_text(TINY.read_text())
    guard = MemoryGuard.for_model(str(tmp_path), "cuda", probe=probe)
    assert guard is not None
    return guard


def test_next_trial_waits_until_gpu_memory_is_back(tmp_path: Path) -> None:
    guard = _guard(tmp_path, DrainingGpu())
    waited = guard.wait_gpu_released(0, timeout_s=10)
    assert 0 < waited < 10
    assert guard.gpu_used() == 0


def test_sizes_and_vllm_defaults_come_out_of_the_command() -> None:
    assert parse_size("64M") == 64 * 2**20 and parse_size("50m") == 50_000_000 and parse_size("1G") == GiB
    s = sizing_from_argv(["m", "--kv-offloading-size", "16", "--block-size=32", "--enforce-eager"], "cuda")
    assert s.offload_bytes == 16 * GiB and s.block_size == 32 and s.enforce_eager
    assert s.gpu_memory_utilization == 0.92 and s.max_num_batched_tokens == 8192
    cpu = sizing_from_argv(["--kv-cache-memory-bytes", "32M"], "cpu")
    assert cpu.kv_cache_memory_bytes == 32 * 2**20 and cpu.block_size == 128
    ascend = sizing_from_argv(
        ["--kv-transfer-config", '{"kv_connector_extra_config": {"cpu_swap_space_gb": 8}}'], "cuda"
    )
    assert ascend.offload_bytes == 8 * GiB


def test_a_pool_of_exactly_one_request_does_not_fit(tmp_path: Path) -> None:
    """vLLM keeps one block for itself: 2,048 KV tokens cannot serve one 2,048-token request (seen:
    'estimated maximum model length is 2016'); one block more can."""
    (tmp_path / "config.json").write_text(TINY.read_text())
    guard = MemoryGuard.for_model(str(tmp_path), "cpu", probe=FakeProbe(host=(24 * GiB, 20 * GiB)))
    assert guard is not None
    exact = 2048 * guard.shape.kv_bytes_per_token()
    argv = ["--max-model-len", "2048", "--block-size", "32"]
    assert not guard.check(
        sizing_from_argv([*argv, "--kv-cache-memory-bytes", str(exact)], guard.platform)
    ).feasible
    one_more = exact + 32 * guard.shape.kv_bytes_per_token()
    assert guard.check(
        sizing_from_argv([*argv, "--kv-cache-memory-bytes", str(one_more)], guard.platform)
    ).feasible


def test_the_commands_dtype_and_kv_cache_dtype_size_the_kv_and_the_weights(tmp_path: Path) -> None:
    """``--dtype float32`` serves a bf16 model in float32 (twice the weight and KV bytes: the CPU
    build's KV line halves, checked against vLLM in test_kv_estimate_vs_vllm); ``--kv-cache-dtype
    fp8`` halves the KV bytes a token takes on the GPU and in a host pool."""
    (tmp_path / "config.json").write_text(TINY.read_text())
    guard = MemoryGuard.for_model(str(tmp_path), "cpu", probe=FakeProbe(host=(24 * GiB, 20 * GiB)))
    assert guard is not None and guard.shape.dtype == "bfloat16"
    pool = ["--max-model-len", "1024", "--kv-cache-memory-bytes", "64M"]
    auto = guard.check(sizing_from_argv(pool, guard.platform)).estimate
    wide = guard.check(sizing_from_argv([*pool, "--dtype", "float32"], guard.platform)).estimate
    assert auto is not None and wide is not None
    assert wide.kv_tokens == auto.kv_tokens // 2
    assert wide.weights == 2 * auto.weights
    per_token = guard.shape.kv_bytes_per_token()
    assert guard.kv_bytes_per_token(sizing_from_argv(pool, guard.platform)) == per_token
    assert (
        guard.kv_bytes_per_token(sizing_from_argv([*pool, "--dtype", "float32"], guard.platform))
        == 2 * per_token
    )
    assert (
        guard.kv_bytes_per_token(sizing_from_argv([*pool, "--kv-cache-dtype", "fp8"], guard.platform))
        == per_token // 2
    )
    assert guard.kv_bytes_per_token(sizing_from_argv([*pool, "--dtype", "half"], guard.platform)) == per_token
    assert sizing_from_argv(["--dtype=float32"], "cpu").dtype == "float32"
    assert sizing_from_argv([], "cuda").dtype == "auto"
