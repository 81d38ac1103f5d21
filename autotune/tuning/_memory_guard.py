"""Memory before and during a trial: feasibility before launch, measured peaks while it runs.

The seam between the trial loop and :mod:`autotune.memory`: it turns a rendered vLLM command
into the estimator's input, and a run's memory peaks into constraint violations.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from autotune.engine import EngineSizing, sizing_from_argv
from autotune.memory import (
    DEFAULT_HOST_SHARE,
    FeasibilityInput,
    FeasibilityVerdict,
    GiB,
    MachineFacts,
    MachineProbe,
    MemoryPeak,
    MemorySampler,
    ModelShape,
    check_feasibility,
    clamp_offload_range,
    memory_constraint_violations,
    read_machine_facts,
    weight_bytes,
)
from autotune.space import SearchSpace

__all__ = ["MemoryGuard", "clamp_space"]

log = logging.getLogger(__name__)


@dataclass
class MemoryGuard:
    """What the tool knows of the model and the machine; checks a command and watches a run."""

    shape: ModelShape
    weights: int
    platform: Literal["cuda", "cpu"]
    probe: MachineProbe | None = None  # None: the real machine (NVML, psutil); tests inject readings
    host_share: float = DEFAULT_HOST_SHARE
    allow_swap: bool = False
    load_format_dummy: bool = False
    sizing_fn: Callable[[Sequence[str], Literal["cuda", "cpu"]], EngineSizing] = (
        sizing_from_argv  # the engine's
    )

    @classmethod
    def for_model(
        cls, model_dir: str, platform: Literal["cuda", "cpu"], *, probe: MachineProbe | None = None, **kw: Any
    ) -> MemoryGuard | None:
        """A guard for a local model directory; None for a hub name (its config.json is not here)."""
        path = Path(model_dir)
        if not (path / "config.json").exists():
            log.warning("no %s/config.json: memory feasibility checks are off", model_dir)
            return None
        shape = ModelShape.from_config(path)
        return cls(shape=shape, weights=weight_bytes(path, shape), platform=platform, probe=probe, **kw)

    def sizing(self, engine_argv: Sequence[str]) -> EngineSizing:
        return self.sizing_fn(engine_argv, self.platform)

    def check(self, engine_argv: Sequence[str]) -> FeasibilityVerdict:
        s = self.sizing(engine_argv)
        # vllm-ascend's CPUOffloadingConnector and vLLM's native offload on CUDA both map their whole
        # host pool from /dev/shm (cpu_kv_cache_*, vllm_offload_*.mmap); LMCache keeps it in the heap.
        joined = " ".join(engine_argv)
        in_shm = "CPUOffloadingConnector" in joined or (
            "--kv-offloading-size" in joined and "lmcache" not in joined.lower() and self.platform == "cuda"
        )
        shm_pool = s.offload_bytes if in_shm else 0
        request = FeasibilityInput(
            shape=self.shape,
            weight_bytes=self.weights,
            platform=self.platform,
            gpu_memory_utilization=s.gpu_memory_utilization,
            max_model_len=s.max_model_len or self.shape.max_position_embeddings or 4096,
            block_size=s.block_size,
            kv_cache_memory_bytes=s.kv_cache_memory_bytes,
            offload_bytes=s.offload_bytes,
            shm_pool_bytes=shm_pool,
            kv_cache_dtype=s.kv_cache_dtype,
            max_num_batched_tokens=s.max_num_batched_tokens,
            max_num_seqs=s.max_num_seqs,
            cuda_graphs=not s.enforce_eager,
        )
        return check_feasibility(request, read_machine_facts(self.probe), host_share=self.host_share)

    def sampler(self, pid: int) -> MemorySampler:
        return MemorySampler(pid, self.probe)

    def violations(self, peak: MemoryPeak) -> tuple[str, ...]:
        return memory_constraint_violations(peak, read_machine_facts(self.probe), allow_swap=self.allow_swap)

    @staticmethod
    def peak_record(peak: MemoryPeak) -> dict[str, Any]:
        return asdict(peak)

    def gpu_used(self) -> int | None:
        """Bytes used on all visible GPUs now (None without a GPU)."""
        gpus = read_machine_facts(self.probe).gpus
        return sum(g.used for g in gpus) if gpus else None

    def wait_gpu_released(
        self, before: int | None, *, timeout_s: float = 60.0, slack: int = 512 * 2**20
    ) -> float:
        """After a stop, wait until GPU memory is back to where it was before the start (seconds
        waited). A trial must not start while the previous engine's memory is still held."""
        if before is None:
            return 0.0
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            used = self.gpu_used()
            if used is None or used <= before + slack:
                return time.monotonic() - t0
            time.sleep(0.5)
        log.warning("GPU memory not released %.0f s after the engine stopped", timeout_s)
        return time.monotonic() - t0


OFFLOAD_FLAGS = ("--kv-offloading-size",)


def clamp_space(space: SearchSpace, facts: MachineFacts, host_share: float) -> SearchSpace:
    """Drop offload-pool sizes above ``host_share`` of available host memory before the study starts
    (logged in the study's log), so the sampler never proposes a pool that would make the host swap."""
    params = dict(space.parameters)
    for name, p in space.tunable.items():
        is_pool = name == "cpu_swap_space_gb" or p.flag in OFFLOAD_FLAGS
        if not is_pool:
            continue
        limit = clamp_offload_range(float("inf"), facts, host_share)
        if p.type == "categorical" and p.choices:
            kept = tuple(c for c in p.choices if isinstance(c, int | float) and c <= limit)
            if len(kept) < len(p.choices):
                log.info(
                    "clamped %s to %.2f GiB (%.0f%% of %.1f GiB available host memory): choices %s -> %s",
                    name,
                    limit,
                    host_share * 100,
                    facts.host_available / GiB,
                    list(p.choices),
                    list(kept),
                )
                params[name] = p.model_copy(update={"choices": kept or (p.off_value or 0,)})
        elif p.high is not None and p.high > limit:
            log.info("clamped %s high from %g to %.2f GiB (host memory)", name, p.high, limit)
            params[name] = p.model_copy(update={"high": max(limit, p.low or 0.0)})
    return space.model_copy(update={"parameters": params})
