"""A study always has a measured reference.

The baseline is vLLM's defaults plus the user's fixed flags. When that command cannot run on
this machine (the CPU build's default ``gpu_memory_utilization`` 0.92 of the memory node, a GPU
share too large for the free memory), the study measures a named runnable reference instead:
the defaults with the smallest change that fits (the largest KV-memory setting of the space
that passes the memory check), used as the baseline everywhere it is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from autotune.engine import MEMORY_KNOB_FLAGS
from autotune.space import EngineConfig, FlagPairs, Parameter, SearchSpace, describe_values

__all__ = ["BaselinePlan", "plan_baseline", "recheck_baseline"]

# Parameters whose smaller values make a configuration need less memory, in the order tried (the engine's).
_MEMORY_KNOBS = MEMORY_KNOB_FLAGS


class FitCheck(Protocol):
    """What the plan reads of a study's setup (a :class:`~autotune.tuning.TuningSetup`)."""

    @property
    def space(self) -> SearchSpace: ...
    @property
    def fixed(self) -> FlagPairs: ...
    def fit_reasons(self, config: EngineConfig | None = None) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class BaselinePlan:
    defaults_fit: bool
    why_not: tuple[str, ...]  # why the defaults (with the fixed flags) do not fit
    reference: Mapping[str, Any] | None  # a runnable reference's params, when the defaults do not fit
    shown: str = ""  # the reference as flags take it: kv_cache_memory_bytes=128M
    fixed_knobs: tuple[str, ...] = ()  # memory flags the user fixed (the plan does not change them)

    @property
    def measurable(self) -> bool:
        return self.defaults_fit or self.reference is not None

    def describe(self) -> str:
        if self.defaults_fit:
            return "vLLM's defaults"
        if self.reference is None and self.fixed_knobs:
            return (
                f"nothing: vLLM's defaults with your fixed {', '.join(self.fixed_knobs)} do not fit, and the "
                "study does not change a flag you fixed (fix: a smaller value of that flag)"
            )
        if self.reference is None:
            return "nothing: neither vLLM's defaults nor any KV-memory setting of the space fits"
        return f"reference {self.shown}"


def _candidates(p: Parameter) -> list[Any]:
    """The parameter's values from the largest down (a grid of 24 for a range)."""
    if p.type == "categorical" and p.choices:
        return sorted((c for c in p.choices if isinstance(c, int | float)), reverse=True)
    if p.low is None or p.high is None:
        return []
    grid = np.geomspace(p.high, p.low, 24) if p.log and p.low > 0 else np.linspace(p.high, p.low, 24)
    if p.type == "int":
        return sorted({int(v) for v in grid}, reverse=True)
    return [round(float(v), 4) for v in grid]


def plan_baseline(setup: FitCheck) -> BaselinePlan:
    """Do vLLM's defaults fit here? If not, the reference to measure instead."""
    why = setup.fit_reasons()
    if not why:
        return BaselinePlan(True, (), None)
    fixed = {name for name, _ in setup.fixed}
    for knob in _MEMORY_KNOBS:
        for name, p in setup.space.tunable.items():
            if p.flag != knob or knob in fixed:
                continue
            for value in _candidates(p):
                if not setup.fit_reasons(EngineConfig.chosen(setup.space, {name: value})):
                    return BaselinePlan(
                        False, why, {name: value}, describe_values(setup.space, {name: value})
                    )
    return BaselinePlan(False, why, None, fixed_knobs=tuple(k for k in _MEMORY_KNOBS if k in fixed))


def recheck_baseline(setup: FitCheck) -> Mapping[str, Any] | None:
    """When the baseline is about to run: vLLM's defaults checked again against the machine as it is
    now (another tenant may have taken memory since the plan); a runnable reference when they no
    longer fit (None: they fit, or nothing in the space does, and the launch records why)."""
    if not setup.fit_reasons():
        return None
    return plan_baseline(setup).reference
