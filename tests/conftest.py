from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
FAKE_VLLM = REPO / "tests" / "fakes" / "fake_vllm.py"
FAKE_LAUNCHER = (sys.executable, str(FAKE_VLLM))
MARK_ENV = "AUTOTUNE_TEST_MARK"


_GROUPS: dict[str, set[int]] = {}


def processes_marked(mark: str) -> list[psutil.Process]:
    """Live processes we started under ``mark``: those whose environment carries
    ``AUTOTUNE_TEST_MARK=mark``, and every member of their process groups. vLLM's engine-core
    processes rename themselves (setproctitle), which overwrites their /proc environ, so they are
    found through the group their guardian leads; groups seen once are remembered."""
    groups = _GROUPS.setdefault(mark, set())
    procs = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            procs.append(p)
            if p.environ().get(MARK_ENV) == mark and os.getpgid(p.pid) == p.pid:
                groups.add(p.pid)  # a group our engine leads (its guardian), not the test runner's
        except (psutil.Error, OSError):
            continue
    found = []
    for p in procs:
        try:
            if os.getpgid(p.pid) in groups or p.environ().get(MARK_ENV) == mark:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def wait_no_processes(mark: str, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = processes_marked(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_marked(mark)
    return left


@pytest.fixture
def mark() -> Iterator[str]:
    """A marker for engines started by one test; the test fails if any of them outlives it."""
    value = uuid.uuid4().hex
    yield value
    left = wait_no_processes(value)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, f"engine processes outlived the test: {[_argv_head(p) for p in left]}"


def _argv_head(p: psutil.Process) -> list[str] | str:
    """The first words of a process's command line (a zombie or a gone process: said so)."""
    try:
        return p.cmdline()[:4]
    except psutil.Error as exc:
        return f"pid {p.pid}: {type(exc).__name__}"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from autotune.tiny_model import make_tiny_model

    cache = os.environ.get("AUTOTUNE_TEST_MODEL_DIR")
    target = Path(cache) if cache else tmp_path_factory.mktemp("models") / "tiny"
    return make_tiny_model(target)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_vllm = os.environ.get("AUTOTUNE_SKIP_VLLM") == "1"
    for item in items:
        if skip_vllm and "vllm" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="AUTOTUNE_SKIP_VLLM=1"))
