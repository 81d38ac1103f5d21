"""Running docker/entrypoint.sh outside a container, for the tests of tests/docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO

__all__ = [
    "API_KEY",
    "AUTOTUNE",
    "ENTRYPOINT",
    "SECRET",
    "clean_env",
    "fake_autotune",
    "faked",
    "run_entrypoint",
]

ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
AUTOTUNE = Path(sys.executable).parent / "autotune"
SECRET = "pg-test-Secret-4711"
API_KEY = "sk-docker-test-key-0815"


def clean_env(**extra: str) -> dict[str, str]:
    """The entrypoint's environment: nothing of the caller's AUTOTUNE_* or PG* leaks in."""
    base = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "TMPDIR"}}
    return {**base, **extra}


def fake_autotune(tmp_path: Path) -> Path:
    """An `autotune` that prints what it was given: argv, its pid and the secrets it can see."""
    path = tmp_path / "fake-autotune"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "keys = ('PGPASSWORD', 'AUTOTUNE_STORAGE', 'VLLM_API_KEY', 'MY_KEY')\n"
        "print(json.dumps({'argv': sys.argv[1:], 'pid': os.getpid(),"
        " 'env': {k: os.environ[k] for k in keys if k in os.environ}}))\n"
    )
    path.chmod(0o755)
    return path


def run_entrypoint(
    env: dict[str, str], *args: str, timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRYPOINT), *args], env=env, cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout
    )


def faked(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[dict[str, Any], str]:
    """Run the entrypoint with the fake autotune; what the fake received, and the entrypoint's stderr."""
    res = run_entrypoint(clean_env(AUTOTUNE_BIN=str(fake_autotune(tmp_path)), **env), *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr
