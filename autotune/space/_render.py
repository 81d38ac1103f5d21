"""Turn chosen parameter values into what vLLM reads: flags, environment, JSON fields."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.space._model import Parameter, SearchSpace

__all__ = ["RenderedConfig", "describe_values", "merge_json", "render_values"]


@dataclass(frozen=True)
class RenderedConfig:
    """vLLM arguments for one trial (without the model and the fixed engine args)."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def flag_names(self) -> set[str]:
        return {a.split("=", 1)[0] for a in self.args if a.startswith("--")}


def _fmt(p: Parameter, value: Any) -> str:
    if p.format is not None:
        return p.format.format(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def describe_values(space: SearchSpace, values: Mapping[str, Any]) -> str:
    """``kv_cache_memory_bytes=128M, block_size=64``: each value as its flag takes it (with its unit)."""
    return ", ".join(
        f"{name}={_fmt(space.parameters[name], v) if name in space.parameters else v}"
        for name, v in values.items()
    )


def _json_value(p: Parameter, value: Any) -> Any:
    return _fmt(p, value) if p.format is not None else value


def merge_json(into: dict[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``base``'s fields into ``into`` where ``into`` has none (nested objects merged); ``into``."""
    for key, value in base.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge_json(into[key], value)
        elif key not in into:
            into[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    return into


def render_values(space: SearchSpace, values: Mapping[str, Any]) -> RenderedConfig:
    """Render ``values`` (tunable parameter name -> value; inactive ones absent) for vLLM.

    Fields of one JSON-valued flag are merged into one argument, on top of every rendered
    field's ``json_base`` (the connector's name and role, for instance).
    """
    args: list[str] = []
    env: dict[str, str] = {}
    json_flags: dict[str, dict[str, Any]] = {}
    bases: dict[str, list[Mapping[str, Any]]] = {}
    for name, p in space.tunable.items():
        if name not in values:
            continue
        value = values[name]
        if p.off_value is not None and value == p.off_value:
            continue
        if p.env is not None:
            env[p.env] = _fmt(p, value)
        elif p.json_flag is not None:
            obj = json_flags.setdefault(p.json_flag, {})
            if p.json_base:
                bases.setdefault(p.json_flag, []).append(p.json_base)
            *parents, leaf = p.json_keys
            cur = obj
            for part in parents:
                cur = cur.setdefault(part, {})
            cur[leaf] = _json_value(p, value)
        elif p.flag is not None:
            if p.type == "bool":
                args.append(p.flag if value else "--no-" + p.flag[2:])
            else:
                args.extend([p.flag, _fmt(p, value)])
    for flag, obj in json_flags.items():
        for base in bases.get(flag, []):
            merge_json(obj, base)
        args.extend([flag, json.dumps(obj, sort_keys=True)])
    return RenderedConfig(args=tuple(args), env=env)
