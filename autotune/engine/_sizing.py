"""Read the memory-relevant settings out of a vLLM command line, with vLLM's defaults filled in."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from autotune.engine._flags import PP_FLAGS, TP_FLAGS, flag_int
from autotune.errors import ConfigError
from autotune.space import HOST_POOL_FIELDS, flag_pairs, flag_stem

__all__ = ["EngineSizing", "parse_size", "sizes_memory", "sizing_from_argv"]

# What sizing_from_argv reads of a command, as flag stems (the memory guard's inputs).
_MEMORY_STEMS = frozenset(
    {
        "gpu-memory-utilization",
        "kv-cache-memory-bytes",
        "block-size",
        "max-num-batched-tokens",
        "max-num-seqs",
        "kv-offloading-size",
        "kv-cache-dtype",
    }
)
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGTkmgt]?)(i?[Bb])?\s*$")
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """vLLM's human-readable sizes: ``64M`` = 64 MiB (upper case binary), ``50m`` = 50 MB, ``123`` bytes."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ConfigError(f"cannot read the size {text!r} (fix: write bytes, or a number with K, M, G or T)")
    number, unit = float(m[1]), m[2]
    mult = _BINARY.get(unit) or _DECIMAL.get(unit) or 1
    return int(number * mult)


@dataclass(frozen=True)
class EngineSizing:
    platform: Literal["cuda", "cpu"]
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int | None
    max_model_len: int | None  # None: the model's own maximum
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    offload_bytes: int
    enforce_eager: bool
    kv_cache_dtype: str
    dtype: str = "auto"  # --dtype: the weights' and activations' type as served
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    # vllm-ascend's CPUOffloadingConnector and vLLM's native offload on CUDA both map their whole host
    # pool from /dev/shm (cpu_kv_cache_*, vllm_offload_*.mmap); LMCache keeps it in the heap.
    host_pool_in_shm: bool = False

    @property
    def ranks(self) -> int:
        """GPUs one engine of this command occupies: tensor-parallel x pipeline-parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def _flags(argv: Sequence[str]) -> dict[str, str | None]:
    """Flag -> value, each flag spelled with dashes (vLLM reads ``--block_size`` as ``--block-size``)."""
    return {name.replace("_", "-"): value for name, value in flag_pairs(argv, positional=[])}


def _num(f: dict[str, str | None], name: str, default: float) -> float:
    value = f.get(name)
    return float(value) if value not in (None, "") else default


def _offload_bytes(f: dict[str, str | None]) -> int:
    """The host KV pool a command sizes: vLLM's native size, or its connector's (LMCache's per rank)."""
    offload = 0
    if f.get("--kv-offloading-size"):
        offload = int(float(f["--kv-offloading-size"] or 0) * 2**30)
    ktc = f.get("--kv-transfer-config")
    if not ktc:
        return offload
    try:
        extra = json.loads(ktc).get("kv_connector_extra_config") or {}
    except (ValueError, AttributeError):
        extra = {}
    ranks = int(_num(f, "--tensor-parallel-size", 1))
    for key, unit in HOST_POOL_FIELDS.items():
        if key in extra:  # LMCache's size is per tensor-parallel rank
            per = ranks if key.startswith("lmcache.") else 1
            offload = max(offload, int(float(extra[key]) * unit * per))
    return offload


def _host_pool_in_shm(argv: Sequence[str], platform: Literal["cuda", "cpu"]) -> bool:
    """Whether the host pool lives in /dev/shm (vLLM's own offloading), not in the heap (LMCache)."""
    joined = " ".join(argv)
    return "CPUOffloadingConnector" in joined or (
        "--kv-offloading-size" in joined and "lmcache" not in joined.lower() and platform == "cuda"
    )


def sizing_from_argv(argv: Sequence[str], platform: Literal["cuda", "cpu"]) -> EngineSizing:
    f = _flags(argv)
    kv_bytes = f.get("--kv-cache-memory-bytes")
    cpu = platform == "cpu"
    return EngineSizing(
        platform=platform,
        gpu_memory_utilization=_num(f, "--gpu-memory-utilization", 0.92),
        kv_cache_memory_bytes=parse_size(kv_bytes) if kv_bytes else None,
        max_model_len=int(_num(f, "--max-model-len", 0)) or None,
        block_size=int(_num(f, "--block-size", 128 if cpu else 16)),
        max_num_batched_tokens=int(_num(f, "--max-num-batched-tokens", 2048 if cpu else 8192)),
        max_num_seqs=int(_num(f, "--max-num-seqs", 128 if cpu else 1024)),
        offload_bytes=_offload_bytes(f),
        enforce_eager="--enforce-eager" in f,
        kv_cache_dtype=f.get("--kv-cache-dtype") or "auto",
        dtype=f.get("--dtype") or "auto",
        tensor_parallel_size=max(1, flag_int(argv, TP_FLAGS) or 1),
        pipeline_parallel_size=max(1, flag_int(argv, PP_FLAGS) or 1),
        host_pool_in_shm=_host_pool_in_shm(argv, platform),
    )


def sizes_memory(flag: str) -> bool:
    """Whether this flag (``--x``, ``--no-x``, dashes or underscores) is one the sizing reads."""
    return flag_stem(flag) in _MEMORY_STEMS
