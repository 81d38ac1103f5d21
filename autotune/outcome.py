"""What one trial produced, as the study sees it: the seam between study/ and the outside world."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from autotune.bench import MetricsDelta, TrialFigures
from autotune.space import RenderedConfig

__all__ = ["Evaluator", "TrialOutcome", "TrialStatus"]


class TrialStatus(str, Enum):
    OK = "ok"  # measured
    FAILED = "failed"  # the engine did not start or died; ``failure`` says why
    INFEASIBLE = "infeasible"  # rejected before launch (does not fit, bad flags)


@dataclass(frozen=True)
class TrialOutcome:
    status: TrialStatus
    command: tuple[str, ...] = ()
    figures: TrialFigures | None = None
    metrics: MetricsDelta | None = None
    failure: str | None = None
    reason: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    kv_tokens: int | None = None
    kv_max_concurrency: float | None = None
    timings_s: Mapping[str, float] = field(default_factory=dict)  # startup, warmup, measure, teardown
    memory: Mapping[str, Any] = field(default_factory=dict)  # measured peaks (MemoryPeak) or the estimate
    violations: tuple[str, ...] = ()  # memory constraints the run broke (host swapped, GPU full, ...)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """JSON-serialisable record for the study storage."""
        return {
            "status": self.status.value,
            "command": list(self.command),
            "figures": self.figures.as_dict() if self.figures else None,
            "metrics": self.metrics.as_dict() if self.metrics else None,
            "failure": self.failure,
            "reason": self.reason,
            "log_path": self.log_path,
            "log_tail": self.log_tail,
            "kv_tokens": self.kv_tokens,
            "kv_max_concurrency": self.kv_max_concurrency,
            "timings_s": dict(self.timings_s),
            "memory": dict(self.memory),
            "violations": list(self.violations),
            **({"extra": dict(self.extra)} if self.extra else {}),
        }


class Evaluator(Protocol):
    def __call__(self, number: int, rendered: RenderedConfig) -> TrialOutcome: ...
