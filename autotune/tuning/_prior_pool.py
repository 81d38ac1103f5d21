"""The prior's host-pool plan: where the GPU's KV cannot hold the workload's working set, the
smallest pool that adds the prefix hits a larger one would (an informed candidate), pool sizes above
the one that holds the whole working set dropped from the space, or, where no pool can add hits,
offload measured once as a check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from autotune.space import Parameter, SearchSpace

__all__ = ["GAIN", "GiB", "offload_plan"]

GAIN = 0.02  # a pool (or a block size) must add this share of prompt tokens to count
GiB = 2**30


class Prior(Protocol):
    """What the plan reads and writes of the prior (:class:`autotune.tuning._prior.Prior`)."""

    space: SearchSpace
    candidates: list[dict[str, Any]]
    lines: list[str]
    offload_helps: bool | None

    def hit_share(self, block_size: int, capacity_tokens: int) -> float: ...

    def pool_tokens(self, gib: float, values: Mapping[str, Any]) -> int: ...


def offload_plan(
    prior: Prior,
    named: tuple[str, Parameter],
    best: dict[str, Any],
    gpu: int,
    block: int,
    hit: float,
    working_tokens: int,
) -> SearchSpace:
    space, (name, pool) = prior.space, named
    sizes = sorted(float(c) for c in pool.grid() if float(c or 0) > 0)
    if not sizes:
        return space
    per_pool = [(s, prior.hit_share(block, max(gpu, prior.pool_tokens(s, best)))) for s in sizes]
    top = max(h for _, h in per_pool)
    holding = next((s for s in sizes if prior.pool_tokens(s, best) >= working_tokens), sizes[-1])
    if top - hit >= GAIN:
        prior.offload_helps = True
        chosen = next(s for s, h in per_pool if h >= top - GAIN / 4)
        prior.candidates.append({**best, name: _as_choice(pool, chosen)})
        prior.lines.append(
            f"prior: a host pool adds prefix hits: the working set ({working_tokens:,} tokens) exceeds the GPU KV "
            f"({gpu:,}); {chosen:g} GiB predicts {dict(per_pool)[chosen]:.1%} against {hit:.1%} on the GPU alone"
        )
    else:
        prior.offload_helps = False
        prior.candidates.append({**best, name: _as_choice(pool, sizes[0])})
        prior.lines.append(
            f"prior: a host pool cannot add prefix hits (predicted {top:.1%} with the largest pool against {hit:.1%} "
            f"without): offload is measured once, as a check ({sizes[0]:g} GiB), and not launched again"
        )
    if pool.type == "categorical" and pool.choices:
        kept = tuple(c for c in pool.choices if float(c or 0) <= holding)
        if len(kept) < len(pool.choices):
            prior.lines.append(
                f"prior: pool sizes above {holding:g} GiB dropped ({holding:g} GiB holds the whole working set): "
                f"choices {list(pool.choices)} -> {list(kept)}"
            )
            params = dict(space.parameters)
            params[name] = pool.model_copy(update={"choices": kept})
            return space.model_copy(update={"parameters": params})
    return space


def _as_choice(p: Parameter, value: float) -> Any:
    for c in p.choices or ():
        if float(c or 0) == value:
            return c
    return value
