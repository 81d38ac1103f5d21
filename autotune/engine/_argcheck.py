"""Check a rendered vLLM command with the installed vLLM's own argument parser, before launching.

A flag the installed version lacks, or a bad value, fails in milliseconds with vLLM's own
message instead of after a 30-120 s start. The parser runs in a worker process that imports
vLLM once (seconds) and then answers each check quickly.

The worker is started by its file path (it imports nothing of autotune, so the Python that runs
vLLM need not have autotune installed) with ``PYTHONSAFEPATH=1``, so nothing in the working
directory is importable in it, and with :func:`checker_env`: the user's secrets (database URLs,
API keys, tokens) never reach a process that only parses flags.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engine._process import safe_python_env
from autotune.errors import EngineArgsError

__all__ = ["ArgCheck", "VllmArgChecker", "checker_env"]

_WORKER = Path(__file__).with_name("_argcheck_worker.py")

# What importing vLLM and building its parser may read: the platform (CUDA_*, ROCm, Ascend, TPU),
# vLLM's own settings (vllm/envs.py), Hugging Face and torch settings, locale and paths.
_KEEP = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "SHELL", "VIRTUAL_ENV"}
)
_KEEP_PREFIXES = (
    "LC_", "LD_", "PYTHON", "CONDA_", "XDG_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "VLLM_",
    "CUDA_", "NVIDIA_", "NCCL_", "ROCM_", "HIP_", "ASCEND_", "TPU_", "XLA_", "TORCH", "TRITON_",
    "OMP_", "MKL_", "KMP_",
)  # fmt: skip
# Never passed on, whatever the prefix: VLLM_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


def checker_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The argument checker's environment: the variables vLLM's import may need, without secrets.

    Only names in a short allow-list (see ``_KEEP``/``_KEEP_PREFIXES``) pass, and none whose name
    says it holds a secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``...): no
    ``VLLM_API_KEY``, ``HF_TOKEN``, ``PGPASSWORD`` or ``AUTOTUNE_STORAGE``. Usage statistics off,
    hub offline, and ``PYTHONSAFEPATH=1`` (see :func:`~autotune.engine._process.safe_python_env`).
    """
    source = os.environ if environ is None else environ
    kept = {
        name: value
        for name, value in source.items()
        if (name in _KEEP or name.startswith(_KEEP_PREFIXES)) and not _SECRET.search(name)
    }
    kept.update({"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    return safe_python_env(kept)


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
            [self.python, str(_WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=checker_env(),
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

    def __exit__(self, *exc: object) -> None:
        self.close()
