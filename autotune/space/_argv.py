"""The one reading of a vLLM command line's flags: ``--x=VALUE``, ``--x VALUE`` and ``--flag``.

A token that follows a flag and does not start with ``--`` is that flag's value (``-1`` too);
other tokens are positional (the model, for ``vllm serve MODEL``). Used to render, size, check
and export commands, so all of them read an argv the same way. :func:`split_engine_arg` reads one
``--engine-arg`` item into tokens; :func:`flag_stem` names the setting a flag sets (dashes or
underscores, ``--x`` or ``--no-x``), so a flag given twice is recognised however it is spelled.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from autotune.errors import ConfigError

__all__ = ["FlagPairs", "flag_pairs", "flag_stem", "flags_to_argv", "merge_flag_items", "split_engine_arg"]

FlagPairs = tuple[tuple[str, str | None], ...]


def flag_pairs(argv: Sequence[str], *, positional: list[str] | None = None) -> FlagPairs:
    """``["--a", "1", "--b=x", "--c"]`` -> ``(("--a", "1"), ("--b", "x"), ("--c", None))``.

    Positional tokens are appended to ``positional`` when given, else ``ValueError`` names the first.
    """
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            if positional is None:
                raise ValueError(tok)
            positional.append(tok)
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        if eq:
            pairs.append((name, inline))
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append((name, argv[i + 1]))
            i += 2
        else:
            pairs.append((name, None))
            i += 1
    return tuple(pairs)


def flags_to_argv(pairs: Sequence[tuple[str, str | None]]) -> list[str]:
    return [tok for name, value in pairs for tok in ((name,) if value is None else (name, value))]


def flag_stem(flag: str) -> str:
    """The setting a flag sets: ``--gpu_memory_utilization`` and ``--gpu-memory-utilization`` are
    ``gpu-memory-utilization``; ``--no-enable-prefix-caching`` is ``enable-prefix-caching``."""
    flag = flag.replace("_", "-")  # vLLM's parser reads --gpu_memory_utilization as --gpu-memory-utilization
    return flag[5:] if flag.startswith("--no-") else flag[2:]


def split_engine_arg(item: str) -> list[str]:
    """One ``--engine-arg`` value into tokens. ``--x=VALUE`` and ``--x VALUE`` keep VALUE whole
    (JSON stays JSON); several flags in one item (``--a 1 --b``) are split like a shell would."""
    item = item.strip()
    if not item.startswith("-"):
        return [item]  # a value on its own (the previous item was its flag): kept whole
    if item.startswith("--") and "=" in item.split(None, 1)[0]:
        name, value = item.split("=", 1)
        return [name, value]
    parts = item.split(None, 1)
    if len(parts) == 2 and parts[0].startswith("--") and not parts[1].lstrip().startswith("--"):
        value = parts[1].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if " --" not in value or value.startswith("{"):
            return [parts[0], value]
    try:
        return shlex.split(item)
    except ValueError as exc:
        raise ConfigError(f"--engine-arg: cannot read {item!r}: {exc} (fix: balance the quotes)") from exc


def _units(items: Sequence[str]) -> list[tuple[str | None, list[str]]]:
    """``items`` cut into (stem, items) units: a flag with its value, as the user wrote them. A value
    on its own joins the flag before it; an item of several flags is one unit per flag."""
    units: list[tuple[str | None, list[str]]] = []
    for item in items:
        pairs = flag_pairs(split_engine_arg(item), positional=[])
        if not pairs:  # a value on its own: the previous item's flag takes it
            if units:
                units[-1][1].append(item)
            else:
                units.append((None, [item]))
        elif len(pairs) == 1:
            units.append((flag_stem(pairs[0][0]), [item]))
        else:
            units += [(flag_stem(n), [n if v is None else f"{n}={v}"]) for n, v in pairs]
    return units


def merge_flag_items(base: Sequence[str], added: Sequence[str]) -> tuple[str, ...]:
    """``base`` with ``added`` on top: a flag of ``added`` that ``base`` sets already (however
    spelled: ``--x=1``, ``--x 1``, ``--x_y``, ``--no-x``) replaces that flag's value in place; the
    others are appended (a flag that ``added`` gives twice: its last value)."""
    merged = _units(base)
    for stem, unit in _units(added):
        at = [i for i, (s, _) in enumerate(merged) if stem is not None and s == stem]
        if not at:
            merged.append((stem, unit))
            continue
        merged[at[0]] = (stem, unit)
        merged = [u for i, u in enumerate(merged) if i not in at[1:]]
    return tuple(item for _, unit in merged for item in unit)
