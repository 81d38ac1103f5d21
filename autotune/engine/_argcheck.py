"""Check a rendered vLLM command with the installed vLLM's own argument parser, before launching.

A flag the installed version lacks, or a bad value, fails in milliseconds with vLLM's own
message instead of after a 30-120 s start. The parser runs in a worker process that imports
vLLM once (seconds) and then answers each check quickly.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from autotune.errors import EngineArgsError

__all__ = ["ArgCheck", "VllmArgChecker"]


@dataclass(frozen=True)
class ArgCheck:
    ok: bool
    error: str | None
    args: dict[str, Any]


class VllmArgChecker:
    """``with VllmArgChecker() as c: c.check(["--block-size", "7"])``. Python: the one running vLLM."""

    def __init__(self, python: str = sys.executable, *, start_timeout_s: float = 180.0):
        self.python = python
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self.version: str | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [self.python, "-m", "autotune.engine._argcheck_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**__import__("os").environ, "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"},
        )
        hello = self._readline()
        if not hello.get("ready"):
            self.close()
            raise EngineArgsError(f"cannot load vLLM's argument parser: {hello.get('error', 'no answer')}")
        self.version = hello.get("version")

    def _readline(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            return {"ready": False, "ok": False, "error": "the vLLM argument checker exited"}
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def check(self, argv: Sequence[str]) -> ArgCheck:
        """Parse ``argv`` (model and flags, without the launcher) as ``vllm serve`` would."""
        with self._lock:
            if self._proc is None:
                self.start()
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"argv": list(argv)}) + "\n")
            self._proc.stdin.flush()
            reply = self._readline()
        return ArgCheck(ok=bool(reply.get("ok")), error=reply.get("error"), args=reply.get("args") or {})

    def close(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(Exception):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            with contextlib.suppress(Exception):
                self._proc.wait(timeout=5)
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc = None

    def __enter__(self) -> VllmArgChecker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
