"""One vLLM server process per trial: start, wait for health, stop the whole process group."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from autotune.engine import _reaper
from autotune.engine._launch import LaunchSpec, build_argv
from autotune.engine._logscan import (
    FailureClass,
    KvCapacity,
    classify_failure,
    failure_evidence,
    parse_kv_capacity,
)
from autotune.errors import EngineCrashed, EngineError, EngineStartError
from autotune.space import RenderedConfig

__all__ = ["EngineProcess", "free_port", "port_is_free"]

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


_GUARDIAN = Path(__file__).with_name("_guardian.py")


class EngineProcess:
    """A vLLM server for one trial. Use as a context manager; ``stop()`` is idempotent."""

    def __init__(
        self, spec: LaunchSpec, rendered: RenderedConfig, log_path: Path, *, port: int | None = None
    ):
        self.spec = spec
        self.rendered = rendered
        self.log_path = Path(log_path)
        self.port = port or free_port(spec.host)
        self.argv = build_argv(spec, rendered, self.port)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pgid: int | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._proc is not None:
            raise EngineError("engine already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as logf:
            logf.write(("$ " + " ".join(self.argv) + "\n").encode())
            logf.flush()
            self._proc = subprocess.Popen(
                [sys.executable, str(_GUARDIAN), "--", *self.argv],
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,  # held open by us only: its end-of-file tells the guardian we died
                env=self.spec.process_env(self.rendered),
                start_new_session=True,
            )
        self._pgid = self._proc.pid
        self.started_at = time.monotonic()
        _reaper.register(self)
        log.debug("started engine pid %s on port %s: %s", self._proc.pid, self.port, " ".join(self.argv))

    def wait_healthy(self, *, poll_s: float = 0.5) -> None:
        """Block until ``GET /health`` answers 200; raise :class:`EngineStartError` if it never does."""
        assert self._proc is not None and self.started_at is not None
        deadline = self.started_at + self.spec.startup_timeout_s
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._fail_start(code, timed_out=False)
                try:
                    if client.get(self.base_url + "/health").status_code == 200:
                        self.ready_at = time.monotonic()
                        self.startup_s = self.ready_at - self.started_at
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self._fail_start(None, timed_out=True)
                time.sleep(poll_s)

    def _fail_start(self, code: int | None, *, timed_out: bool) -> None:
        self.stop()
        text = self.log_text()
        failure = classify_failure(text, exit_code=code, timed_out=timed_out)
        why = (
            f"not healthy after {self.spec.startup_timeout_s:.0f} s"
            if timed_out
            else f"exited with code {code} before it was healthy"
        )
        evidence = failure_evidence(text)
        raise EngineStartError(
            f"vLLM {why} ({failure.value}{': ' + evidence if evidence else ''}); log: {self.log_path}",
            failure=failure.value,
            log_tail=self.log_tail(),
            log_path=str(self.log_path),
        )

    def check_alive(self) -> None:
        """Raise :class:`EngineCrashed` if the server died after it was healthy."""
        if self._proc is None:
            return
        code = self._proc.poll()
        if code is not None:
            text = self.log_text()
            failure = classify_failure(text, exit_code=code)
            evidence = failure_evidence(text)
            raise EngineCrashed(
                f"vLLM died during the run with exit code {code} "
                f"({failure.value}{': ' + evidence if evidence else ''}); log: {self.log_path}",
                failure=failure.value,
                log_tail=self.log_tail(),
                log_path=str(self.log_path),
            )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left, and wait until the port is free."""
        if self._proc is None or self._pgid is None:
            return
        members = self._group_members()
        self._signal_group(signal.SIGTERM)
        try:
            self._proc.wait(timeout=self.spec.stop_timeout_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "engine pid %s ignored SIGTERM for %.0f s; killing", self._proc.pid, self.spec.stop_timeout_s
            )
        self._signal_group(signal.SIGKILL)
        for p in members:  # children that left the group (setsid) are still ours
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        psutil.wait_procs(members, timeout=10)
        deadline = time.monotonic() + 15
        while not port_is_free(self.port, self.spec.host) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        _reaper.unregister(self)
        self._pgid = None

    def _group_members(self) -> list[psutil.Process]:
        assert self._proc is not None
        try:
            root = psutil.Process(self._proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._pgid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, sig)

    # -- what it printed -------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def kv_capacity(self) -> KvCapacity | None:
        return parse_kv_capacity(self.log_text())

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ += ["FailureClass"]
