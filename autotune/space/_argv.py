"""The one reading of a vLLM command line's flags: ``--x=VALUE``, ``--x VALUE`` and ``--flag``.

A token that follows a flag and does not start with ``--`` is that flag's value (``-1`` too);
other tokens are positional (the model, for ``vllm serve MODEL``). Used to render, size, check
and export commands, so all of them read an argv the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FlagPairs", "flag_pairs", "flags_to_argv"]

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
