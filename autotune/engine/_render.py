"""An :class:`~autotune.space.EngineConfig` in vLLM's words: the one place a configuration becomes
flags, environment and JSON fields (the command line is built from it in ``_launch.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autotune.engine._flags import budget_flag
from autotune.space import EngineConfig, RenderedConfig, SearchSpace, format_value, json_value, merge_json

__all__ = ["render_config", "render_values"]


def render_config(config: EngineConfig) -> RenderedConfig:
    """``config`` as vLLM takes it: its values' flags, then each role's (a group model's share of the
    budget), then its own words."""
    own = render_values(config.space, config.values) if config.space is not None else RenderedConfig(args=())
    roles = tuple(f"{budget_flag(role)}={_role_text(role, value)}" for role, value in config.roles.items())
    return RenderedConfig(args=(*own.args, *roles, *config.flags), env={**own.env, **config.env})


def _role_text(role: str, value: Any) -> str:
    """A budget's value as its flag takes it: KV bytes in whole MiB (``512M``), a GPU share to 3 places."""
    if role == "kv_bytes":
        whole = int(value)
        return f"{whole // 2**20}M" if whole % 2**20 == 0 else str(whole)
    return f"{float(value):.3f}"


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
            env[p.env] = format_value(p, value)
        elif p.json_flag is not None:
            obj = json_flags.setdefault(p.json_flag, {})
            if p.json_base:
                bases.setdefault(p.json_flag, []).append(p.json_base)
            *parents, leaf = p.json_keys
            cur = obj
            for part in parents:
                cur = cur.setdefault(part, {})
            cur[leaf] = json_value(p, value)
        elif p.flag is not None:
            if p.type == "bool":
                args.append(p.flag if value else "--no-" + p.flag[2:])
            else:
                args.extend([p.flag, format_value(p, value)])
    for flag, obj in json_flags.items():
        for base in bases.get(flag, []):
            merge_json(obj, base)
        args.extend([flag, json.dumps(obj, sort_keys=True)])
    return RenderedConfig(args=tuple(args), env=env)
