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

__all__ = ["Objective", "parse_slo"]

_MAXIMIZE = {"output_throughput", "request_throughput", "goodput", "capacity"}
_METRIC_RE = re.compile(r"^(ttft|tpot|itl|e2el)_(p50|p75|p90|p95|p99|mean)$")


def _check_metric(name: str, where: str) -> str:
    if name in _MAXIMIZE or _METRIC_RE.match(name):
        return name
    raise ConfigError(
        f"{where}: unknown metric {name!r} (fix: use ttft|tpot|itl|e2el with _p50/_p75/_p90/_p95/_p99/_mean, "
        "or output_throughput, request_throughput, goodput, capacity)"
    )


def parse_slo(text: str) -> tuple[str, float]:
    """``ttft_p90=800ms`` -> ("ttft_p90", 800.0) in milliseconds (``s`` suffix accepted)."""
    m = re.fullmatch(r"\s*([a-z0-9_.]+)\s*=\s*([0-9.]+)\s*(ms|s)?\s*", text)
    if not m:
        raise ConfigError(
            f"--slo: cannot read {text!r} (fix: write it as METRIC=VALUEms, e.g. ttft_p90=800ms)"
        )
    name = _check_metric(m[1], "--slo")
    if name in _MAXIMIZE:
        raise ConfigError(
            f"--slo: {name} is a rate, not a latency (fix: use a latency metric such as ttft_p90)"
        )
    value = float(m[2]) * (1000.0 if m[3] == "s" else 1.0)
    return name, value


@dataclass(frozen=True)
class Objective:
    metric: str = "ttft_p90"
    min_throughput_ratio: float = 0.95  # output throughput >= this x the baseline's
    max_failed_requests: int = 0
    slos_ms: Mapping[str, float] = field(default_factory=dict)  # metric -> limit (ms)

    def __post_init__(self) -> None:
        _check_metric(self.metric, "--objective")
        if self.metric == "goodput" and not self.request_slos:
            raise ConfigError(
                "--objective goodput needs a per-request --slo on ttft, tpot or e2el "
                "(fix: add e.g. --slo ttft_p90=800ms; itl SLOs do not define goodput)"
            )
        if self.metric == "capacity" and not self.slos_ms:
            raise ConfigError(
                "--objective capacity needs at least one --slo: capacity is the most load at which every "
                "SLO holds (fix: add e.g. --slo ttft_p90=800ms; several are allowed)"
            )

    @property
    def is_capacity(self) -> bool:
        """Capacity at the SLOs: the figure is the highest load that held, measured in levels."""
        return self.metric == "capacity"

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        return "maximize" if self.metric in _MAXIMIZE else "minimize"

    @property
    def request_slos(self) -> dict[str, float]:
        """Per-request limits for goodput (``vllm bench serve --goodput``: ttft, tpot, e2el)."""
        out: dict[str, float] = {}
        for name, limit in self.slos_ms.items():
            base = name.split("_", 1)[0]
            if base in ("ttft", "tpot", "e2el"):
                out[base] = min(limit, out.get(base, math.inf))
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
        pct = figures.get("percentiles_ms", {})
        mean = figures.get("mean_ms", {})
        for name, limit in self.slos_ms.items():
            value = mean.get(name[:-5]) if name.endswith("_mean") else pct.get(name)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                out.append(1.0)
            else:
                out.append((float(value) - limit) / limit)
        out.append(0.0)
        out.append(float(memory_violations))
        return out

    @staticmethod
    def is_feasible(constraints: Sequence[float]) -> bool:
        return all(c <= 0 for c in constraints)
