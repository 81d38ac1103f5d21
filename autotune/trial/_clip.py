"""The space clipped by what is fixed: values that the memory guard refuses whatever the rest of the
configuration is (a KV size that cannot hold one request of the fixed ``--max-model-len``, a memory
share the GPU cannot give) are taken out of the space before the study samples it, and said once.

Only the parameters the guard reads (KV memory, block size, batching, the offload pool, the KV
dtype) are checked, over the grid of their values, against one reading of the machine; the others
do not change a memory verdict. A value is kept when at least one configuration with it fits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from autotune.engine import EngineSizing, sizes_memory
from autotune.space import (
    HOST_POOL_FIELDS,
    MEMORY_ROLES,
    EngineConfig,
    Parameter,
    SearchSpace,
    describe_values,
)
from autotune.trial._memory_guard import MemoryGuard

__all__ = ["clip_space"]

GRID_LIMIT = 20_000  # configurations checked at most (a few seconds); a larger grid is not clipped


def _reads_memory(p: Parameter) -> bool:
    """A parameter the guard reads: by its role, its flag, or a host-pool field of a JSON flag."""
    if p.condition is not None:
        return False
    if p.role in MEMORY_ROLES:
        return True
    if p.flag is not None:
        return sizes_memory(p.flag)
    return p.json_flag is not None and bool(p.json_keys) and p.json_keys[-1] in HOST_POOL_FIELDS


def clip_space(
    space: SearchSpace, guard: MemoryGuard, sizing_of: Callable[[EngineConfig], EngineSizing]
) -> tuple[SearchSpace, tuple[str, ...]]:
    """``space`` less the values no configuration of it fits with, and one line per clipped parameter.

    ``sizing_of``: the engine's reading of a configuration's memory (the fixed flags included)."""
    knobs = {n: p for n, p in space.tunable.items() if _reads_memory(p)}
    grids = {n: p.grid() for n, p in knobs.items()}
    if not knobs or math.prod(len(g) for g in grids.values()) > GRID_LIMIT:
        return space, ()
    fits, why = _fitting_values(space, guard, grids, sizing_of)
    if not any(fits.values()):
        return space, ()  # nothing fits: each trial is recorded infeasible with its reason
    params, lines = dict(space.parameters), []
    for name, p in knobs.items():
        kept = [v for v in grids[name] if v in fits[name]]
        dropped = [v for v in grids[name] if v not in fits[name]]
        if not dropped or not kept or p.type == "bool":
            continue
        if p.type == "categorical":
            params[name] = p.model_copy(update={"choices": tuple(kept)})
        else:
            params[name] = p.model_copy(update={"low": min(kept), "high": max(kept)})
        shown = ", ".join(describe_values(space, {name: v}).split("=", 1)[1] for v in dropped)
        lines.append(
            f"not searched: {name} {shown}: no configuration with it fits here with your fixed flags "
            f"(e.g. {why.get((name, dropped[0]), 'refused by the memory check')})"
        )
    return space.model_copy(update={"parameters": params}), tuple(lines)


def _fitting_values(
    space: SearchSpace,
    guard: MemoryGuard,
    grids: Mapping[str, list[Any]],
    sizing_of: Callable[[EngineConfig], EngineSizing],
) -> tuple[dict[str, set[Any]], dict[tuple[str, Any], str]]:
    """Every configuration of the grids checked against one reading of the machine: each
    parameter's values that fit in at least one, and for a (parameter, value) that did not, the
    first reason the guard gave."""
    facts = guard.facts()
    fits: dict[str, set[Any]] = {n: set() for n in grids}
    why: dict[tuple[str, Any], str] = {}
    for combo in itertools.product(*grids.values()):
        values = dict(zip(grids, combo, strict=True))
        verdict = guard.check(sizing_of(EngineConfig.chosen(space, values)), facts)
        for name, value in values.items():
            if verdict.feasible:
                fits[name].add(value)
            elif verdict.reasons:
                why.setdefault((name, value), verdict.reasons[0])
    return fits, why
