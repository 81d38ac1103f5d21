"""Memory: what a configuration needs, what the machine has, and what a run really used.

``ModelShape`` (from ``config.json``) -> ``estimate_memory`` (vLLM's accounting, before a
launch) -> ``check_feasibility`` (against ``read_machine_facts``) -> ``MemorySampler`` (peaks
during a run) -> ``memory_constraint_violations``.
"""

from __future__ import annotations

from autotune.memory._estimate import (
    CPU_RUNTIME_RESERVE_BYTES,
    CUDA_GRAPH_RESERVE_BYTES,
    GiB,
    Platform,
    activation_reserve_bytes,
    cpu_kv_tokens,
    estimate_memory,
    host_offload_bytes,
    weight_bytes,
)
from autotune.memory._feasibility import (
    DEFAULT_HOST_SHARE,
    FeasibilityInput,
    FeasibilityVerdict,
    check_feasibility,
    clamp_offload_range,
)
from autotune.memory._host import HOST_MEMORY_ENV
from autotune.memory._machine import (
    DiskSpace,
    GpuMemory,
    GpuReading,
    GpuSubsetProbe,
    MachineFacts,
    MachineProbe,
    SwapReading,
    SystemProbe,
    read_machine_facts,
)
from autotune.memory._sampler import MemoryPeak, MemorySampler, memory_constraint_violations
from autotune.memory._shape import ModelShape, kv_dtype_bytes

__all__ = [
    "CPU_RUNTIME_RESERVE_BYTES",
    "CUDA_GRAPH_RESERVE_BYTES",
    "DEFAULT_HOST_SHARE",
    "HOST_MEMORY_ENV",
    "DiskSpace",
    "FeasibilityInput",
    "FeasibilityVerdict",
    "GiB",
    "GpuMemory",
    "GpuReading",
    "GpuSubsetProbe",
    "MachineFacts",
    "MachineProbe",
    "MemoryPeak",
    "MemorySampler",
    "ModelShape",
    "Platform",
    "SwapReading",
    "SystemProbe",
    "activation_reserve_bytes",
    "check_feasibility",
    "clamp_offload_range",
    "cpu_kv_tokens",
    "estimate_memory",
    "host_offload_bytes",
    "kv_dtype_bytes",
    "memory_constraint_violations",
    "read_machine_facts",
    "weight_bytes",
]
