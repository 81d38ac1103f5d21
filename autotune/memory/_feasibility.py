"""Will this configuration start on this machine? Decided before launching vLLM.

Each reason is one sentence with the numbers, meant to be recorded as the trial's
infeasibility reason. The checks mirror vLLM's own start-up failures:

- the KV cache cannot hold one ``max_model_len`` request ("To serve at least one request...");
- the GPU budget (``total x utilization``) exceeds memory free now, less the CUDA context
  the new process creates ("Free memory on device ... is less than desired");
- on the CPU build, the KV bytes or the utilization budget exceed the memory node's available;
- a CPU KV offload pool larger than ``host_share`` of available host memory (it is pinned),
  or any offload pool on the CPU build (vLLM refuses it);
- a shared-memory pool larger than ``/dev/shm`` has free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from autotune.memory._estimate import GiB, MemoryEstimate, estimate_memory
from autotune.memory._machine import MachineFacts
from autotune.memory._shape import ModelShape

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "DEFAULT_HOST_SHARE",
    "FeasibilityInput",
    "FeasibilityVerdict",
    "check_feasibility",
    "clamp_offload_range",
]

# Memory a new CUDA process takes before vLLM reads "free" (context, kernels): not in its budget.
CUDA_CONTEXT_BYTES = 512 * (1 << 20)
DEFAULT_HOST_SHARE = 0.65


@dataclass(frozen=True)
class FeasibilityInput:
    """One candidate configuration, reduced to what decides its memory."""

    shape: ModelShape
    weight_bytes: int
    platform: Literal["cuda", "cpu"]
    gpu_memory_utilization: float
    max_model_len: int
    block_size: int
    kv_cache_memory_bytes: int | None = None
    offload_bytes: int = 0
    shm_pool_bytes: int = 0
    kv_cache_dtype: str = "auto"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    cuda_graphs: bool = True
    activation_bytes: int | None = None


@dataclass(frozen=True)
class FeasibilityVerdict:
    feasible: bool
    reasons: tuple[str, ...]
    estimate: MemoryEstimate | None


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _estimate(request: FeasibilityInput, total: int) -> MemoryEstimate:
    return estimate_memory(
        request.shape,
        weight_bytes=request.weight_bytes,
        gpu_total_bytes=total,
        gpu_memory_utilization=request.gpu_memory_utilization,
        max_model_len=request.max_model_len,
        block_size=request.block_size,
        activation_bytes=request.activation_bytes,
        kv_cache_dtype=request.kv_cache_dtype,
        kv_cache_memory_bytes=request.kv_cache_memory_bytes,
        max_num_batched_tokens=request.max_num_batched_tokens,
        max_num_seqs=request.max_num_seqs,
        cuda_graphs=request.cuda_graphs,
        platform=request.platform,
    )


def _kv_reasons(request: FeasibilityInput, est: MemoryEstimate) -> list[str]:
    if est.fits_one_request:
        return []
    if est.kv_bytes == 0:
        return [
            f"weights ({_gib(est.weights)}) and the activation reserve ({_gib(est.activation_reserve)}) "
            f"leave nothing of the {_gib(est.budget)} budget for the KV cache; "
            "raise gpu_memory_utilization or use a smaller model"
        ]
    return [
        f"the KV cache ({_gib(est.kv_bytes)}, {est.kv_tokens:,} tokens) cannot hold one request of "
        f"max_model_len {request.max_model_len:,} ({est.max_concurrency:.2f}x); "
        "lower max_model_len or give the KV cache more memory"
    ]


def _cuda_reasons(request: FeasibilityInput, facts: MachineFacts) -> tuple[list[str], MemoryEstimate | None]:
    if not facts.gpus:
        why = next((n for n in facts.notes if "GPU" in n), "no NVIDIA GPU visible")
        return [f"a CUDA engine needs a GPU: {why}"], None
    gpu = facts.gpus[0]
    est = _estimate(request, gpu.total)
    reasons = _kv_reasons(request, est)
    usable = gpu.free - CUDA_CONTEXT_BYTES
    if est.budget > usable:
        held = gpu.total - gpu.free
        util = request.gpu_memory_utilization
        what = (
            f"gpu_memory_utilization {util} x {_gib(gpu.total)} = {_gib(est.budget)}"
            if request.kv_cache_memory_bytes is None
            else f"weights, reserve and the requested KV cache ({_gib(est.budget)})"
        )
        reasons.append(
            f"{what} exceeds the {_gib(max(usable, 0))} usable on GPU {gpu.index} now "
            f"({_gib(gpu.free)} free less {_gib(CUDA_CONTEXT_BYTES)} for the CUDA context; "
            f"other processes hold {_gib(held)})"
        )
    return reasons, est


def _cpu_reasons(request: FeasibilityInput, facts: MachineFacts) -> tuple[list[str], MemoryEstimate]:
    total = facts.node_total if facts.node_total is not None else facts.host_total
    available = facts.node_available if facts.node_available is not None else facts.host_available
    est = _estimate(request, total)
    reasons = _kv_reasons(request, est)
    if request.kv_cache_memory_bytes is not None:
        if est.budget > available:
            reasons.append(
                f"the KV cache ({_gib(est.kv_bytes)}) with weights and runtime "
                f"({_gib(est.weights + est.activation_reserve)}) needs {_gib(est.budget)} of host memory, "
                f"more than the {_gib(available)} available"
            )
    elif est.budget > available:
        reasons.append(
            f"gpu_memory_utilization {request.gpu_memory_utilization} reserves {_gib(est.budget)} of the "
            f"{_gib(total)} host memory (the CPU build's meaning of the flag), "
            f"more than the {_gib(available)} available"
        )
    return reasons, est


def check_feasibility(
    request: FeasibilityInput, facts: MachineFacts, *, host_share: float = DEFAULT_HOST_SHARE
) -> FeasibilityVerdict:
    """Check one configuration against one machine reading; see the module doc for the checks."""
    est: MemoryEstimate | None
    if request.platform == "cuda":
        reasons, est = _cuda_reasons(request, facts)
    else:
        reasons, est = _cpu_reasons(request, facts)
    if request.platform == "cpu" and request.offload_bytes > 0:
        reasons.append(
            "the CPU build cannot offload the KV cache to host memory (vLLM: CPU Offloading is "
            "currently only supported on CUDA-alike and XPU GPUs)"
        )
    host_limit = int(host_share * facts.host_available)
    if request.offload_bytes > host_limit:
        reasons.append(
            f"the CPU KV offload pool ({_gib(request.offload_bytes)}) exceeds {host_share:.0%} of the "
            f"{_gib(facts.host_available)} host memory available ({_gib(host_limit)}); "
            "it is pinned and cannot swap"
        )
    if request.shm_pool_bytes > 0:
        if facts.shm_free is None:
            reasons.append(
                f"a shared-memory pool of {_gib(request.shm_pool_bytes)} needs /dev/shm, which is not mounted"
            )
        elif request.shm_pool_bytes > facts.shm_free:
            reasons.append(
                f"the shared-memory pool ({_gib(request.shm_pool_bytes)}) exceeds the {_gib(facts.shm_free)} "
                f"free in /dev/shm (of {_gib(facts.shm_total or 0)})"
            )
    return FeasibilityVerdict(feasible=not reasons, reasons=tuple(reasons), estimate=est)


def clamp_offload_range(max_gib: float, facts: MachineFacts, host_share: float = DEFAULT_HOST_SHARE) -> float:
    """The largest offload size (GiB, 0.01 steps down) a search space may propose on this machine."""
    limit_gib = host_share * facts.host_available / GiB
    return max(0.0, min(max_gib, math.floor(limit_gib * 100) / 100))
