"""Runs inside the vLLM environment: parse argv with the installed vLLM's own serve parser.

Protocol: one JSON object per line on stdin, ``{"argv": [...]}``; one per line on stdout,
``{"ok": true, "args": {dest: value}}`` or ``{"ok": false, "error": "..."}``. Importing vLLM
takes seconds, so one worker checks every command of a study in milliseconds each.

It is started by its file path, so it imports only the standard library and vLLM: the Python
that runs vLLM need not have autotune installed, and nothing else is looked up on its path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
from typing import Any


def _make_parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for module in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            mod = __import__(module, fromlist=["make_arg_parser"])
        except ImportError:
            continue
        parser = mod.make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
        return parser, getattr(mod, "validate_parsed_serve_args", None)
    raise ImportError("no vLLM serve argument parser found")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        with contextlib.suppress(Exception):
            return _jsonable(dataclasses.asdict(value))
    if hasattr(value, "model_dump"):
        with contextlib.suppress(Exception):
            return _jsonable(value.model_dump())
    return str(value)


def check(parser: Any, validate: Any, argv: list[str]) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
            if validate is not None:
                validate(ns)
    except SystemExit:
        lines = [ln.strip() for ln in err.getvalue().splitlines() if ln.strip()]
        start = next((i for i, ln in enumerate(lines) if ": error: " in ln), max(len(lines) - 1, 0))
        kept = [ln for ln in lines[start:] if not ln.startswith("For further information")]
        return {"ok": False, "error": " ".join(kept)[:500] if kept else "argument error"}
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return {"ok": True, "args": {k: _jsonable(v) for k, v in vars(ns).items()}}


def main() -> None:
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # vLLM's import-time chatter must not corrupt the protocol
    try:
        parser, validate = _make_parser()
        version = __import__("vllm").__version__
    except Exception as exc:
        real_stdout.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        real_stdout.flush()
        return
    real_stdout.write(json.dumps({"ready": True, "version": version}) + "\n")
    real_stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        argv = json.loads(line)["argv"]
        real_stdout.write(json.dumps(check(parser, validate, argv)) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
