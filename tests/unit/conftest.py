"""Shared test data for the memory package: real model configs and a fake machine probe."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autotune.memory import DiskSpace, GiB, GpuMemory, GpuReading, ModelShape, SwapReading

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def config_path(name: str) -> Path:
    return CONFIGS / f"{name}.json"


@pytest.fixture
def shape_of():
    def load(name: str) -> ModelShape:
        return ModelShape.from_config(config_path(name))

    return load


@dataclass
class FakeProbe:
    """A machine whose readings the test sets; ``swaps`` are returned one per call, the last repeats."""

    gpu_list: list[GpuMemory] = field(default_factory=list)
    gpu_note: str = "no NVIDIA GPU visible (NVML: fake)"
    host: tuple[int, int] = (64 * GiB, 48 * GiB)
    node: tuple[int, int] | None = None
    swaps: list[SwapReading] = field(default_factory=lambda: [SwapReading(8 * GiB, 0, 0, 0)])
    shm_space: DiskSpace | None = field(default_factory=lambda: DiskSpace(32 * GiB, 30 * GiB))
    rss: int = 1 * GiB
    swap_calls: int = 0

    def gpus(self) -> GpuReading:
        if self.gpu_list:
            return GpuReading(gpus=tuple(self.gpu_list))
        return GpuReading(note=self.gpu_note)

    def host_memory(self) -> tuple[int, int]:
        return self.host

    def node_memory(self) -> tuple[int, int] | None:
        return self.node

    def swap(self) -> SwapReading:
        reading = self.swaps[min(self.swap_calls, len(self.swaps) - 1)]
        self.swap_calls += 1
        return reading

    def shm(self) -> DiskSpace | None:
        return self.shm_space

    def tree_rss(self, pid: int) -> int:
        return self.rss


def h100(free: int = 79 * GiB, index: int = 0) -> GpuMemory:
    total = int(79.2 * GiB)
    return GpuMemory(index=index, name="NVIDIA H100 80GB HBM3", total=total, free=free, used=total - free)


@pytest.fixture
def fake_probe() -> type[FakeProbe]:
    """The FakeProbe class (tests build it with the readings they need)."""
    return FakeProbe


@pytest.fixture
def gpu():
    """Build an 80 GB-class GPU reading: ``gpu(free=..., index=...)``."""
    return h100


@pytest.fixture
def model_config_path():
    """Path of a test-data model config by name."""
    return config_path
