"""A search space's values as the model's :class:`Candidate`: KV tokens, block, pool, caching and
the scheduler's limits, by the parameters' roles; what a configuration leaves out is the
calibrated engine's default (:class:`EngineDefaults`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError
from autotune.predict._model import Candidate
from autotune.space import SearchSpace, describe_values

__all__ = ["EngineDefaults", "candidate_of", "grid_of", "kv_bytes_of"]

GiB = 2**30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class EngineDefaults:
    """The calibrated engine's defaults: what a configuration gets for a role it does not set."""

    kv_tokens: int  # the baseline's KV cache, tokens
    # bytes of a configured KV size per token the engine holds (measured: the baseline's size over its
    # tokens; the CPU build launched in float32 doubles the size, so the model's own dtype counts)
    kv_bytes_per_token: int
    block_size: int
    batched_tokens: int
    max_seqs: int


def _bytes(space: SearchSpace, name: str, value: Any) -> int:
    fmt = space.parameters[name].format
    text = fmt.format(value) if fmt else str(value)
    found = _SIZE.match(text)
    if found is None:
        raise ConfigError(f"{name}: {text!r} is not a size (fix: a number of bytes, or with K, M or G)")
    return int(float(found.group(1)) * _UNIT[found.group(2).upper()])


def kv_bytes_of(space: SearchSpace, values: Mapping[str, Any]) -> int | None:
    """The KV cache size ``values`` set, in bytes (None: they leave it to the engine)."""
    name = space.roles.kv_bytes
    v = space.value_of(name, {**space.fixed_values, **values})
    return None if v is None or name is None else _bytes(space, name, v)


def candidate_of(space: SearchSpace, values: Mapping[str, Any], defaults: EngineDefaults) -> Candidate:
    """The candidate ``values`` describe (parameter name -> value; the space's fixed values added)."""
    values = {**space.fixed_values, **values}
    roles = space.roles
    kv_bytes = kv_bytes_of(space, values)
    kv = defaults.kv_tokens if kv_bytes is None else kv_bytes // defaults.kv_bytes_per_token
    pool_gib = float(space.value_of(roles.kv_pool, values) or 0)
    return Candidate(
        label=describe_values(space, values) or "(defaults)",
        gpu_kv_tokens=kv,
        block_size=int(space.value_of(roles.block_size, values, defaults.block_size)),
        batched_tokens=int(space.value_of(roles.batched_tokens, values, defaults.batched_tokens)),
        max_seqs=int(space.value_of(roles.max_seqs, values, defaults.max_seqs)),
        pool_tokens=int(pool_gib * GiB / defaults.kv_bytes_per_token),
        caching=space.value_of(roles.prefix_caching, values, True) is not False,
    )


def grid_of(space: SearchSpace) -> list[dict[str, Any]]:
    """Every combination of the space's tunable choices (a bool: both; a range without choices is
    left at its default)."""
    points: list[dict[str, Any]] = [{}]
    for name, p in space.tunable.items():
        options = list(p.choices) if p.choices else ([True, False] if p.type == "bool" else [])
        if options:
            points = [{**pt, name: v} for pt in points for v in options]
    return points
