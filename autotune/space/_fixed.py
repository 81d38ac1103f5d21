"""What the user fixed is not searched: :func:`fix_space` takes out of a space every parameter whose
flag (or field of a JSON-valued flag, or a ``fixed_by`` spelling) the user's fixed flags set.

A fixed parameter is not sampled, not proposed and not rendered; it keeps the reason
(``fixed by you (--block-size 32)``) and the value in its own unit, so the prior can reason with
it. A fixed value outside the space's range is kept, and the reason says so. Conditions follow: a
parameter that depends on a fixed one is searched without its condition when the fixed value
meets it, and is off (with the reason) when it does not (``--kv-offloading-size 0`` turns off
the pool's chunk size and eviction policy).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.space._argv import FlagPairs, flag_stem
from autotune.space._model import Parameter, Scalar, SearchSpace, json_keys
from autotune.space._profile import condition_text

__all__ = ["fix_space"]

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _lookup(obj: Any, keys: Sequence[str]) -> tuple[bool, Any]:
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


def _number(p: Parameter, text: str) -> Scalar | None:
    head, _, tail = (p.format or "{}").partition("{}")
    if not (text.startswith(head) and text.endswith(tail)) or len(text) <= len(head) + len(tail):
        return None
    core = text[len(head) : len(text) - len(tail)] if tail else text[len(head) :]
    try:
        number = float(core)
    except ValueError:
        return None
    whole = p.type == "int" or any(isinstance(c, int) and not isinstance(c, bool) for c in p.choices or ())
    return int(number) if whole and number.is_integer() else number


def _value(p: Parameter, raw: Any, negated: bool) -> Scalar | None:
    """The fixed value in the parameter's own unit (None: it cannot be read as one)."""
    if p.type == "bool":
        if raw is None:
            return not negated
        text = str(raw).lower()
        return (text in _TRUE) != negated if text in (*_TRUE, *_FALSE) else None
    if raw is None:
        return None
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        return raw
    number = _number(p, str(raw))
    if number is not None:
        return number
    return str(raw) if p.type == "categorical" and str(raw) in map(str, p.choices or ()) else None


def _outside(p: Parameter, value: Scalar | None) -> str:
    if value is None:
        return ""
    if p.choices is not None and value not in p.choices:
        return f"; not one of the space's choices {list(p.choices)}: used as you set it"
    low, high = p.low, p.high
    if low is not None and high is not None and isinstance(value, int | float) and not low <= value <= high:
        return f"; outside the space's range {low:g}..{high:g}: used as you set it"
    return ""


def _targets(p: Parameter) -> list[tuple[str | None, str | None, tuple[str, ...], float]]:
    """(flag, json_flag, json keys, divisor) of every way the user may set what ``p`` tunes."""
    out = [(p.flag, p.json_flag, p.json_keys, 1.0)]
    out += [
        (f.flag, f.json_flag, json_keys(f.json_path) if f.json_path else (), f.divisor) for f in p.fixed_by
    ]
    return out


def _scaled(value: Any, divisor: float) -> Any:
    if divisor == 1.0 or isinstance(value, bool):
        return value
    try:
        return float(value) / divisor
    except (TypeError, ValueError):
        return None


def _fixed_by_user(
    p: Parameter, fixed: Mapping[str, tuple[str, str | None]]
) -> tuple[str, Scalar | None] | None:
    """(what the user wrote, the value in ``p``'s unit) when the fixed flags set ``p``."""
    for flag, json_flag, keys, divisor in _targets(p):
        if flag is not None and flag_stem(flag) in fixed:
            name, raw = fixed[flag_stem(flag)]
            shown = name if raw is None else f"{name} {raw}"
            negated = name.replace("_", "-").startswith("--no-")
            return shown, _value(p, _scaled(raw, divisor), negated)
        if json_flag is not None and flag_stem(json_flag) in fixed:
            name, raw = fixed[flag_stem(json_flag)]
            try:
                found, value = _lookup(json.loads(raw or ""), keys)
            except ValueError:
                continue
            if found:
                return f"{name} {'.'.join(keys)}={json.dumps(value)}", _value(
                    p, _scaled(value, divisor), False
                )
    return None


def fix_space(space: SearchSpace, fixed: FlagPairs) -> SearchSpace:
    """``space`` less what ``fixed`` (the user's fixed flags) sets; conditions on it resolved. Pure."""
    by_stem = {flag_stem(name): (name, value) for name, value in fixed}  # a flag given twice: the last
    params = dict(space.parameters)
    for name, p in space.parameters.items():
        hit = _fixed_by_user(p, by_stem) if p.tunable else None
        if hit is not None:
            shown, value = hit
            why = f"fixed by you ({shown}){_outside(p, value)}"
            params[name] = p.model_copy(update={"fixed": why, "fixed_value": value})
    for name, p in params.items():  # declaration order: a condition's parameter comes first
        c, dep = p.condition, params[p.condition.param] if p.condition else None
        if c is None or dep is None or dep.fixed is None or not p.tunable:
            continue
        if dep.fixed_value is not None and c.holds(dep.fixed_value):
            params[name] = p.model_copy(update={"condition": None})
        else:
            why = f"off: tuned only when {c.param} is {condition_text(c)}, and {c.param} is {dep.fixed}"
            params[name] = p.model_copy(update={"fixed": why})
    return space.model_copy(update={"parameters": params})
