"""The order a group's engines start in: engines that share a GPU one at a time, each once the one
before it is healthy (vLLM sizes its KV cache from the memory it sees used while it profiles: on the
H200 two engines of 0.25 started together read 15-20 GiB of the other's load as their own), the CPU
build's together; an engine that fails to start keeps the next from starting at all."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.study import TrialRecord, TrialStatus
from autotune.studyfile import load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import GroupEvaluator, build_group
from tests.conftest import FAKE_LAUNCHER
from tests.unit.group.test_group_trial import _group_file

FLAGS = {"check_args": False, "launcher": " ".join(FAKE_LAUNCHER), "warmup": 0, "max_requests": 12}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("group-order-models")
    return make_tiny_model(root / "l8", layers=8), make_tiny_model(root / "l2", layers=2)


class _Engines:
    """Stands in for each model's evaluator: says when its engine starts and is up, in one list."""

    def __init__(self, fails: str | None = None) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.fails = fails

    def evaluator(self, name: str) -> Callable[..., TrialRecord]:
        def run(number: int, rendered: Any, listener: Any) -> TrialRecord:
            with self.lock:
                self.events.append(f"{name} starts")
            time.sleep(0.3)  # the engine loading
            if name == self.fails:
                return TrialRecord(status=TrialStatus.FAILED, failure="no_kv_room", reason="no KV room")
            with self.lock:
                self.events.append(f"{name} up")
            listener.engine_up()
            return TrialRecord(status=TrialStatus.OK)

        return run


def _run(tmp_path: Path, models: tuple[Path, Path], one_at_a_time: bool, engines: _Engines) -> Any:
    group = load_group_file(_group_file(tmp_path, models))
    assert group is not None
    with build_group(group, FLAGS) as setup:
        evaluate = GroupEvaluator(setup, tmp_path / "logs", check_args=False)
        assert evaluate.one_at_a_time is False  # the CPU build: each pool is sized in bytes
        object.__setattr__(evaluate, "one_at_a_time_", one_at_a_time)
        for name in setup.names:
            evaluate.evaluators[name] = engines.evaluator(name)  # type: ignore[assignment]
        return evaluate(0, setup.baseline, {})


@pytest.fixture
def shared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        GroupEvaluator, "one_at_a_time", property(lambda self: getattr(self, "one_at_a_time_", False))
    )


def test_engines_sharing_a_gpu_start_one_at_a_time(
    tmp_path: Path, models: tuple[Path, Path], shared_gpu: None
) -> None:
    engines = _Engines()
    _run(tmp_path, models, True, engines)
    assert engines.events == ["rag starts", "rag up", "chat starts", "chat up"]


def test_the_cpu_builds_engines_start_together(
    tmp_path: Path, models: tuple[Path, Path], shared_gpu: None
) -> None:
    engines = _Engines()
    _run(tmp_path, models, False, engines)
    assert engines.events[:2] == ["rag starts", "chat starts"] or engines.events[:2] == [
        "chat starts",
        "rag starts",
    ]


def test_an_engine_that_fails_to_start_keeps_the_next_from_starting(
    tmp_path: Path, models: tuple[Path, Path], shared_gpu: None
) -> None:
    engines = _Engines(fails="rag")
    result = _run(tmp_path, models, True, engines)
    assert engines.events == ["rag starts"]
    assert result.failed_model == "rag" and "no KV room" in (result.reason or "")
    assert result.records["chat"].failure == "group_stopped"


_SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))  # the engine loading: nothing listens yet
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _launch(tmp_path: Path, server_args: str) -> subprocess.CompletedProcess[str]:
    from autotune.engine._ports import free_port
    from autotune.tuning.group._export import _up

    port = free_port()
    (tmp_path / "server.py").write_text(_SERVER)
    script = [
        "#!/bin/sh",
        "set -eu",
        *_up(sys.executable),
        f"{shlex.quote(sys.executable)} {tmp_path / 'server.py'} {port} {server_args} &",
        f"up {port} $! rag",
        "echo next starts",
        "kill $! 2>/dev/null || true",
    ]
    (tmp_path / "launch.sh").write_text("\n".join(script) + "\n")
    return subprocess.run(
        ["sh", str(tmp_path / "launch.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )


def test_the_launch_file_on_a_shared_gpu_starts_the_next_engine_once_the_one_before_is_healthy(
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    done = _launch(tmp_path, "1.5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "next starts" and time.monotonic() - t0 >= 1.5


def test_the_launch_file_stops_when_an_engine_exits_before_it_is_healthy(tmp_path: Path) -> None:
    done = _launch(tmp_path, "not-a-number")  # the server exits at once, as vLLM with no KV room
    assert done.returncode != 0 and "next starts" not in done.stdout
    assert "launch.sh: rag exited before it was healthy" in done.stderr
