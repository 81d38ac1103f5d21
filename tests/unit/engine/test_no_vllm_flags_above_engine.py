"""vLLM's flags are spelled only inside ``autotune/engine/`` (issue 46: a typed config crosses the seam).

The set of vLLM's flags is the installed vLLM's own ``serve`` parser (the one the argument checker
builds). Every string literal in ``autotune/**/*.py`` outside ``engine/`` is read with :mod:`ast`: a
literal that is such a flag, or starts with one followed by ``=`` or a space (``"--port=8000"``, the
constant head of an f-string), fails the test with its file and line. Docstrings are prose and are not
read; comments are not literals. A flag named in the middle of a message (``"(fix: raise
--gpu-memory-utilization)"``) is not a literal that builds a command, and is not counted.

A name that is also one of autotune's own options (read from the Typer app: ``--model``, ``--config``,
``--max-model-len``, ``--block-size``, ``--seed``) is allowed in ``cli/``, where it is autotune's
option, and elsewhere only in a sentence ("--model is required (fix: ...)"), never as the flag itself.
Not caught: a flag built at run time (``"--" + name``), and a flag's name without its dashes (the
keys of a ``vllm serve --config`` file in ``export/``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import typer

import autotune
from autotune.cli import app
from autotune.engine._argcheck_worker import _make_parser

PACKAGE = Path(autotune.__file__).parent

# No file is exempt: the group's budget asks the engine for its flag by role, its export for the
# model's arguments.
KNOWN_REMAINING: frozenset[str] = frozenset()


def _vllm_flags() -> frozenset[str]:
    parser, _ = _make_parser()
    flags = {o for a in parser._actions for o in a.option_strings}
    # Short forms of one letter (-h, -n, -q, -r) are too common to be vLLM's; -tp, -pp are.
    return frozenset(f for f in flags if f.startswith("--") or len(f) >= 3)


def _own_options() -> frozenset[str]:
    own: set[str] = set()

    def walk(cmd: Any) -> None:  # Typer's own Click copy: its commands are not click's classes
        for p in cmd.params:
            own.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return frozenset(own)


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _is_flag(text: str, flags: frozenset[str], shared: frozenset[str] = frozenset()) -> str | None:
    """The flag ``text`` spells: the flag itself, ``FLAG=...``, or ``FLAG ...``. For a ``shared`` name
    (one of autotune's options too), ``FLAG ...`` is a sentence about autotune's option ("--model is
    required"), not counted: only the flag itself or ``FLAG=...``."""
    head = text.split("=", 1)[0].split(" ", 1)[0]
    if head not in flags:
        return None
    if head in shared and text != head and not text.startswith(head + "="):
        return None
    return head


def _offenders(flags: frozenset[str], own: frozenset[str] = frozenset()) -> list[str]:
    """file:line: flag of each literal outside engine/ that spells one of ``flags``; a flag that is
    also one of autotune's own options (``own``: ``--model``, ``--config``, ``--max-model-len``...) is
    allowed in ``cli/`` alone, where it names autotune's option."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("engine/") or rel in KNOWN_REMAINING:
            continue
        banned = flags - own if rel.startswith("cli/") else flags
        shared = flags & own
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                flag = _is_flag(node.value, banned, shared)
                if flag:
                    found.append(f"autotune/{rel}:{node.lineno}: {flag}")
    return found


def test_the_flag_set_is_vllms_less_autotunes_own() -> None:
    flags = _vllm_flags()
    own = _own_options()
    assert {
        "--kv-cache-memory-bytes",
        "--gpu-memory-utilization",
        "--no-enable-prefix-caching",
        "-tp",
    } <= flags
    assert {"--objective", "--workload", "--model", "--engine-arg"} <= own


def test_no_vllm_flag_literal_above_engine() -> None:
    offenders = _offenders(_vllm_flags(), _own_options())
    assert not offenders, "vLLM flag literals above engine/ (move them into autotune/engine/):\n" + "\n".join(
        offenders
    )


def test_the_check_sees_a_literal(tmp_path: Path) -> None:
    """The walk finds a flag in a plain literal and the head of an f-string, not in a docstring, nor
    in a sentence about an option autotune shares with vLLM."""
    src = (
        '"""--port doc."""\nA = "--kv-cache-memory-bytes"\nB = f"--max-num-seqs={A}"\nC = "see --port"\n'
        'D = "--model is required"\nE = "--model"\n'
    )
    tree = ast.parse(src)
    skip = _docstrings(tree)
    flags = frozenset({"--port", "--kv-cache-memory-bytes", "--max-num-seqs", "--model"})
    hits = [
        _is_flag(n.value, flags, frozenset({"--model"}))
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
    ]
    assert sorted(h for h in hits if h) == ["--kv-cache-memory-bytes", "--max-num-seqs", "--model"]


def test_nothing_above_engine_reads_flags() -> None:
    """The one reading of a command's flags (``flag_pairs``, ``flag_stem``) lives in ``space/`` (which
    renders and reads ``--engine-arg``) and is used by ``engine/`` alone: the rest asks the engine."""
    readers = {"flag_pairs", "flag_stem", "split_engine_arg"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("engine/", "space/")) or rel in KNOWN_REMAINING:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune.space"):
                found += [f"autotune/{rel}:{node.lineno}: {a.name}" for a in node.names if a.name in readers]
    assert not found, "flag reading above engine/ (ask autotune.engine instead):\n" + "\n".join(found)
