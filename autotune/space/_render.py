"""A configuration in its engine's words (:class:`RenderedConfig`), and chosen values as their flags
take them (for the eye: the engine alone renders a configuration, ``engine/_render.py``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.space._model import Parameter, SearchSpace

__all__ = ["RenderedConfig", "describe_values", "format_value", "json_value", "merge_json"]


@dataclass(frozen=True)
class RenderedConfig:
    """A configuration in its engine's words: the flags and environment one trial adds (without the
    model and the fixed flags). Made by the engine (``Engine.render``) and kept in trial records."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def flag_names(self) -> set[str]:
        return {a.split("=", 1)[0] for a in self.args if a.startswith("--")}


def format_value(p: Parameter, value: Any) -> str:
    if p.format is not None:
        return p.format.format(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def describe_values(space: SearchSpace, values: Mapping[str, Any]) -> str:
    """``kv_cache_memory_bytes=128M, block_size=64``: each value as its flag takes it (with its unit)."""
    return ", ".join(
        f"{name}={format_value(space.parameters[name], v) if name in space.parameters else v}"
        for name, v in values.items()
    )


def json_value(p: Parameter, value: Any) -> Any:
    return format_value(p, value) if p.format is not None else value


def merge_json(into: dict[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Copy ``base``'s fields into ``into`` where ``into`` has none (nested objects merged); ``into``."""
    for key, value in base.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge_json(into[key], value)
        elif key not in into:
            into[key] = copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)
    return into
