"""vLLM's ``serve --config`` file read as argv and back: its keys are flags without ``--``, ``no-x: true``
for ``--no-x``, JSON flags as mappings (how ``vllm serve --config`` expands a YAML file)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engine._flags import PER_TRIAL_FLAGS
from autotune.errors import ExportError
from autotune.space import flag_pairs

__all__ = ["args_to_config", "canonical_flags", "config_to_argv", "typed_value"]


def typed_value(value: str) -> Any:
    """Keep a flag value's type in YAML: ints and floats as numbers, JSON objects as mappings."""
    if value.startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            continue
    return value


def args_to_config(argv: Sequence[str]) -> dict[str, Any]:
    """``["--block-size", "32", "--no-enable-prefix-caching"]`` -> ``{"block-size": 32,
    "no-enable-prefix-caching": True}``. A ``--no-x`` flag is written as ``no-x: true``: older
    ``vllm serve --config`` silently drop ``x: false``."""
    try:
        pairs = flag_pairs(argv)
    except ValueError as exc:
        raise ExportError(f"cannot export argument {exc.args[0]!r}: expected a --flag") from None
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in PER_TRIAL_FLAGS:
            continue
        out[name[2:].replace("_", "-")] = True if value is None else typed_value(value)  # vLLM reads both
    return out


def config_to_argv(config: Mapping[str, Any]) -> list[str]:
    """The inverse of :func:`args_to_config`, as ``vllm serve --config`` expands a YAML file."""
    argv: list[str] = []
    for key, value in config.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, sort_keys=True)]
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def canonical_flags(argv: Sequence[str]) -> Counter[tuple[str, str | None]]:
    """Flags as vLLM reads them: ``_`` = ``-``, JSON by content, numbers by value."""
    return Counter(
        (n.replace("_", "-"), None if v is None else json.dumps(typed_value(v), sort_keys=True))
        for n, v in flag_pairs(argv)
    )
