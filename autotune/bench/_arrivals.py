"""When each session starts: replayed timestamps, Poisson, bursty (gamma), or closed loop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from autotune.errors import ConfigError
from autotune.workload import Workload, arrival_offsets

__all__ = ["ArrivalSpec", "plan_offsets"]

Mode = Literal["timestamps", "poisson", "gamma", "closed"]


@dataclass(frozen=True)
class ArrivalSpec:
    """``timestamps``: the file's times divided by ``speed``; ``poisson``/``gamma``: ``rate`` sessions
    per second (gamma with shape ``burstiness``: < 1 is burstier, 1 is Poisson, as ``vllm bench serve``);
    ``closed``: ``concurrency`` sessions in flight at all times."""

    mode: Mode
    rate: float | None = None
    burstiness: float = 1.0
    speed: float = 1.0
    concurrency: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode in ("poisson", "gamma") and not (self.rate and self.rate > 0):
            raise ConfigError(f"--rate: arrival mode {self.mode} needs a rate > 0 (fix: pass --rate N)")
        if self.mode == "closed" and not (self.concurrency and self.concurrency >= 1):
            raise ConfigError("--concurrency: closed-loop replay needs a concurrency >= 1")
        if self.speed <= 0:
            raise ConfigError(f"--speed: must be > 0, got {self.speed}")
        if self.burstiness <= 0:
            raise ConfigError(f"--burstiness: must be > 0, got {self.burstiness}")

    def describe(self) -> str:
        if self.mode == "timestamps":
            return "file timestamps" + (f" x{self.speed:g} speed" if self.speed != 1 else "")
        if self.mode == "closed":
            return f"closed loop, concurrency {self.concurrency}"
        extra = f", burstiness {self.burstiness:g}" if self.mode == "gamma" else ""
        return f"{self.mode} at {self.rate:g}/s{extra}"

    @staticmethod
    def default_for(workload: Workload) -> ArrivalSpec:
        if workload.has_timestamps:
            return ArrivalSpec(mode="timestamps")
        return ArrivalSpec(mode="closed", concurrency=4)


def plan_offsets(first_turn_timestamps: list[float | None], spec: ArrivalSpec) -> np.ndarray | None:
    """Planned start offset (seconds) of each session's first turn; ``None`` for closed loop."""
    n = len(first_turn_timestamps)
    if spec.mode == "closed":
        return None
    if spec.mode == "timestamps":
        if any(t is None for t in first_turn_timestamps):
            raise ConfigError(
                "arrival mode 'timestamps' needs a timestamp on every request "
                "(fix: add timestamps, or pass --rate N or --concurrency N)"
            )
        ts = np.asarray(first_turn_timestamps, dtype=float)
        return (ts - ts.min()) / spec.speed if n else ts
    assert spec.rate is not None
    return arrival_offsets(n, spec.rate, 1.0 if spec.mode == "poisson" else spec.burstiness, spec.seed)
