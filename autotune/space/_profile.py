"""Resolve a search space for one engine profile: ``render:`` mappings become plain parameters.

A parameter may say, per engine profile, how its value reaches that engine (``render:``; see
search_spaces/README.md). :func:`apply_profile` picks each parameter's entry for the profile
(or its top-level target when the mapping does not name the profile), adds the profile's JSON
base (the connector's name, role and module path) to fields of a JSON-valued flag, and marks
``unsupported`` whatever targets a flag the profile cannot take. The result has one target per
parameter, so suggesting, rendering and exporting work unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from autotune.space._model import Condition, Parameter, SearchSpace
from autotune.space._render import merge_json

__all__ = ["EngineProfileLike", "apply_profile", "condition_text", "describe_target"]

_TARGET_KEYS = ("flag", "env", "json_flag", "json_path", "format", "json_base")


class EngineProfileLike(Protocol):
    """What :func:`apply_profile` needs of an engine profile (``autotune.engine.EngineProfile``)."""

    @property
    def name(self) -> str: ...

    @property
    def platform(self) -> str: ...

    @property
    def json_bases(self) -> Mapping[str, Mapping[str, Any]]:
        """Per JSON-valued flag, the object tuned fields are inserted into."""
        ...

    @property
    def unsupported_flags(self) -> Mapping[str, str]:
        """Flags this engine cannot take, with the reason (a parameter rendering to one is not tuned)."""
        ...


def _resolve(p: Parameter, profile: EngineProfileLike) -> Parameter:
    data = p.model_dump(exclude={"render"})
    target = (p.render or {}).get(profile.name)  # type: ignore[call-overload]
    if target is not None:
        data.update(dict.fromkeys(_TARGET_KEYS), unsupported=None)
        data.update(target.model_dump(exclude_none=True))
    elif p.render is not None and not p.has_target and p.unsupported is None:
        data["unsupported"] = (
            f"this space says how it reaches {', '.join(p.render)}, not the {profile.name} engine profile"
        )
    if data["unsupported"] is None:
        blocked = [f for f in (data["flag"], data["json_flag"]) if f in profile.unsupported_flags]
        if blocked:
            data["unsupported"] = profile.unsupported_flags[blocked[0]]
    json_flag = data["json_flag"]
    if data["unsupported"] is None and json_flag in profile.json_bases:
        data["json_base"] = merge_json(dict(data["json_base"] or {}), profile.json_bases[json_flag])
    return Parameter.model_validate(data)


def apply_profile(space: SearchSpace, profile: EngineProfileLike) -> SearchSpace:
    """``space`` as ``profile``'s engine takes it: one target per parameter, no ``render:`` left.

    Pure: the space passed in is not changed. The result's ``platform`` is the profile's.
    """
    return SearchSpace.model_validate(
        {
            "name": space.name,
            "platform": profile.platform,
            "description": space.description,
            "parameters": {name: _resolve(p, profile) for name, p in space.parameters.items()},
        }
    )


def describe_target(p: Parameter) -> str:
    """One line saying how a (resolved) parameter reaches vLLM, e.g. ``--kv-offloading-size <value>``."""
    if p.unsupported_reason is not None:
        return f"unsupported: {p.unsupported_reason}"
    value = p.format.replace("{}", "<value>") if p.format else "<value>"
    if p.flag is not None:
        how = f"{p.flag} / --no-{p.flag[2:]}" if p.type == "bool" else f"{p.flag} {value}"
    elif p.env is not None:
        how = f"environment {p.env}={value}"
    else:
        connector = (p.json_base or {}).get("kv_connector")
        path = ".".join(f'"{k}"' if "." in k else k for k in p.json_keys)
        how = f"{p.json_flag} {path}" + (f" ({connector})" if connector else "")
    if p.off_value is not None:
        how += f"; {p.off_value} = off (nothing rendered)"
    if p.condition is not None:
        how += f"; only when {p.condition.param} is {condition_text(p.condition)}"
    return how


def condition_text(c: Condition) -> str:
    """What a condition asks of its parameter: ``> 0``, ``not 0 and one of [8, 16]``."""
    parts = []
    if c.equals is not None:
        parts.append(f"{c.equals}")
    if c.not_equals is not None:
        parts.append(f"not {c.not_equals}")
    if c.greater_than is not None:
        parts.append(f"> {c.greater_than:g}")
    if c.one_of is not None:
        parts.append(f"one of {list(c.one_of)}")
    return " and ".join(parts) or "set"
