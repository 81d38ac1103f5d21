"""Memory before and during a trial: feasibility before launch, measured peaks while it runs.

The seam between the trial loop and :mod:`autotune.memory`: it turns a configuration's sizing (the
engine's reading of it, ``Engine.sizing``) into the estimator's input, and a run's memory peaks into
constraint violations.

A worker's guard (:meth:`MemoryGuard.for_gpus`) sees only the GPUs the worker was given: the
feasibility check, the sampler, ``gpu_used`` and the wait for release act on those alone, so a
neighbour's engine on another GPU neither blocks nor slows this worker. A tensor-parallel
command is checked per rank: each of its GPUs must hold its share of the weights and KV cache.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from autotune.engine import HOST_POOL_FLAGS, EngineSizing
from autotune.memory import (
    DEFAULT_HOST_SHARE,
    HOST_MEMORY_ENV,
    FeasibilityInput,
    FeasibilityVerdict,
    GiB,
    GpuSubsetProbe,
    MachineFacts,
    MachineProbe,
    MemoryPeak,
    MemorySampler,
    ModelShape,
    SystemProbe,
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
    gpus: tuple[int, ...] | None = None  # the GPUs it watches (NVML indices); None: every visible one

    def for_gpus(self, gpus: Sequence[int]) -> MemoryGuard:
        """This guard, seeing only ``gpus`` (a worker's): facts, feasibility, sampler, release."""
        # one real probe, kept open for the worker's life: the sampler reads it several times a second
        inner = self.probe if self.probe is not None else SystemProbe()
        if isinstance(inner, GpuSubsetProbe):
            inner = inner.inner
        return dataclasses.replace(self, probe=GpuSubsetProbe(inner, tuple(gpus)), gpus=tuple(gpus))

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

    def facts(self) -> MachineFacts:
        """The machine as this guard sees it now (one reading: pass it to several :meth:`check` calls)."""
        return read_machine_facts(self.probe)

    def check(self, sizing: EngineSizing, facts: MachineFacts | None = None) -> FeasibilityVerdict:
        """Would a configuration of this sizing fit the machine (``facts``: one reading of it;
        default: read now)?"""
        request = self._request(sizing)
        facts = facts if facts is not None else read_machine_facts(self.probe)
        ranks = sizing.ranks
        if self.platform != "cuda" or (ranks == 1 and self.gpus is None):
            return check_feasibility(request, facts, host_share=self.host_share)  # the first visible GPU
        if len(facts.gpus) < ranks:
            seen = ", ".join(str(g.index) for g in facts.gpus) or "none"
            return FeasibilityVerdict(
                feasible=False,
                reasons=(
                    f"the command needs {ranks} GPUs (tensor x pipeline parallel); this worker has {seen}",
                ),
                estimate=None,
            )
        tp = sizing.tensor_parallel_size
        per_rank = dataclasses.replace(
            request,
            shape=dataclasses.replace(request.shape, num_kv_heads=max(1, request.shape.num_kv_heads // tp)),
            weight_bytes=request.weight_bytes // ranks,
        )
        reasons: list[str] = []
        estimate = None
        for gpu in facts.gpus[:ranks]:  # every rank's GPU must hold its share
            verdict = check_feasibility(
                per_rank, dataclasses.replace(facts, gpus=(gpu,)), host_share=self.host_share
            )
            estimate = estimate or verdict.estimate
            reasons += [r for r in verdict.reasons if r not in reasons]
        return FeasibilityVerdict(feasible=not reasons, reasons=tuple(reasons), estimate=estimate)

    def served(self, sizing: EngineSizing) -> tuple[ModelShape, int]:
        """The model's shape and weight bytes as a configuration of this sizing serves it (its dtype)."""
        return self._served(sizing)

    def _served(self, s: EngineSizing) -> tuple[ModelShape, int]:
        shape = self.shape.served_as(s.dtype)
        if shape.serving_dtype_bytes == self.shape.serving_dtype_bytes or self.shape.weight_bits < 16:
            return shape, self.weights  # quantized weights keep their width whatever --dtype says
        return shape, self.weights * shape.serving_dtype_bytes // self.shape.serving_dtype_bytes

    def kv_bytes_per_token(self, s: EngineSizing) -> int:
        """KV bytes per token under this sizing's dtype and KV cache dtype: what a GPU block or a
        host-pool slot costs (the pool holds the GPU's blocks as they are)."""
        return self._served(s)[0].kv_bytes_per_token(s.kv_cache_dtype)

    def _request(self, s: EngineSizing) -> FeasibilityInput:
        shape, weights = self._served(s)
        shm_pool = s.offload_bytes if s.host_pool_in_shm else 0
        return FeasibilityInput(
            shape=shape,
            weight_bytes=weights,
            platform=self.platform,
            gpu_memory_utilization=s.gpu_memory_utilization,
            max_model_len=s.max_model_len or shape.max_position_embeddings or 4096,
            block_size=s.block_size,
            kv_cache_memory_bytes=s.kv_cache_memory_bytes,
            offload_bytes=s.offload_bytes,
            shm_pool_bytes=shm_pool,
            kv_cache_dtype=s.kv_cache_dtype,
            max_num_batched_tokens=s.max_num_batched_tokens,
            max_num_seqs=s.max_num_seqs,
            cuda_graphs=not s.enforce_eager,
        )

    def sampler(self, pid: int) -> MemorySampler:
        return MemorySampler(pid, self.probe)

    def violations(self, peak: MemoryPeak) -> tuple[str, ...]:
        return memory_constraint_violations(peak, read_machine_facts(self.probe), allow_swap=self.allow_swap)

    @staticmethod
    def peak_record(peak: MemoryPeak) -> dict[str, Any]:
        return asdict(peak)

    def gpu_used(self) -> int | None:
        """Bytes used now on the GPUs it watches (all visible ones by default; None without a GPU)."""
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


def clamp_space(space: SearchSpace, facts: MachineFacts, host_share: float) -> SearchSpace:
    """Drop offload-pool sizes above ``host_share`` of available host memory before the study starts
    (logged in the study's log), so the sampler never proposes a pool that would make the host swap."""
    params = dict(space.parameters)
    pool = space.roles.kv_pool  # the host pool by role, and any parameter that renders a pool flag
    pools = [n for n, p in space.tunable.items() if n == pool or p.flag in HOST_POOL_FLAGS]
    if pools and facts.host_growth:
        log.warning(
            "offload pools (%s) are capped at %.0f%% of the %.1f GiB host memory available now, but this "
            "reading may undercount (%s): the cap may be too low (fix: set %s to the host's real memory)",
            ", ".join(pools),
            host_share * 100,
            facts.host_available / GiB,
            facts.host_growth,
            HOST_MEMORY_ENV,
        )
    for name in pools:
        p = space.tunable[name]
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
