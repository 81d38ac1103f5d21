"""What a study optimises and which constraints a trial must meet to count.

Constraints follow Optuna's convention: a list of floats, feasible when every one is <= 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.errors import ConfigError
from autotune.metrics import METRICS, Metric, Source, figure_value, objective_help

__all__ = ["Objective", "parse_slo"]


def _check_metric(name: str, where: str) -> Metric:
    m = METRICS.get(name)
    if m is not None and m.source is not Source.ENGINE:
        return m
    raise ConfigError(f"{where}: unknown metric {name!r} (fix: use {objective_help()})")


def parse_slo(text: str) -> tuple[str, float]:
    """``ttft_p90=800ms`` -> ("ttft_p90", 800.0) in milliseconds (``s`` suffix accepted)."""
    m = re.fullmatch(r"\s*([a-z0-9_.]+)\s*=\s*([0-9.]+)\s*(ms|s)?\s*", text)
    if not m:
        raise ConfigError(
            f"--slo: cannot read {text!r} (fix: write it as METRIC=VALUEms, e.g. ttft_p90=800ms)"
        )
    slo = _check_metric(m[1], "--slo")
    if slo.source is not Source.LATENCY:
        raise ConfigError(
            f"--slo: {slo.name} is a rate, not a latency (fix: use a latency metric such as ttft_p90)"
        )
    value = float(m[2]) * (1000.0 if m[3] == "s" else 1.0)
    return slo.name, value


@dataclass(frozen=True)
class Objective:
    metric: str = "ttft_p90"
    min_throughput_ratio: float = 0.95  # output throughput >= this x the baseline's
    max_failed_requests: int = 0
    slos_ms: Mapping[str, float] = field(default_factory=dict)  # metric -> limit (ms)

    def __post_init__(self) -> None:
        m = _check_metric(self.metric, "--objective")
        slos = {"per_request": self.request_slos, "any": self.slos_ms}.get(m.needs_slo)
        if slos is not None and not slos:
            raise ConfigError(f"--objective {m.name} needs {m.slo_note}")

    @property
    def is_capacity(self) -> bool:
        """Capacity at the SLOs: the figure is the highest load that held, measured in levels."""
        return _check_metric(self.metric, "--objective").source is Source.CAPACITY

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        return _check_metric(self.metric, "--objective").direction

    @property
    def request_slos(self) -> dict[str, float]:
        """Per-request limits for goodput (``vllm bench serve --goodput``: ttft, tpot, e2el)."""
        out: dict[str, float] = {}
        for name, limit in self.slos_ms.items():
            m = METRICS.get(name)
            if m is not None and m.per_request:
                out[m.series] = min(limit, out.get(m.series, math.inf))
        return out

    def constraint_names(self) -> list[str]:
        return [
            "throughput_vs_baseline",
            "failed_requests",
            *(f"slo:{k}" for k in self.slos_ms),
            "launched",
            "memory",
        ]

    def constraints(
        self,
        figures: Mapping[str, Any] | None,
        baseline_throughput: float | None,
        *,
        feasible: bool = True,
        memory_violations: int = 0,
    ) -> list[float]:
        """Optuna constraint values (<= 0 is met), in :meth:`constraint_names` order.

        ``feasible``: the trial ran and was measured; ``memory_violations``: memory constraints
        it broke while it ran (host swapping makes a trial infeasible whatever its latency)."""
        n = len(self.constraint_names())
        if figures is None or not feasible:
            return [1.0] * n
        out: list[float] = []
        tput = float(figures["output_throughput"])
        if self.is_capacity:  # the load is the figure itself: its throughput is not held to the baseline's
            out.append(0.0)
        elif baseline_throughput and baseline_throughput > 0:
            out.append((self.min_throughput_ratio * baseline_throughput - tput) / baseline_throughput)
        else:
            out.append(0.0)
        out.append(float(figures["failed"]) - self.max_failed_requests)
        for name, limit in self.slos_ms.items():
            value = _latency(figures, name)
            out.append(1.0 if value is None else (value - limit) / limit)
        out.append(0.0)
        out.append(float(memory_violations))
        return out

    @staticmethod
    def is_feasible(constraints: Sequence[float]) -> bool:
        return all(c <= 0 for c in constraints)


def _latency(figures: Mapping[str, Any], name: str) -> float | None:
    """A latency figure by name; None when not measured (absent or NaN)."""
    try:
        value = figure_value(figures, name)
    except KeyError:
        return None
    return None if math.isnan(value) else value
