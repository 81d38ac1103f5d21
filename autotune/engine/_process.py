"""One vLLM server process per trial: start, wait for health, stop the whole process group.

vLLM runs under a guardian (``_guardian.py``) that leads its process group, so that nothing
outlives autotune; the guardian's exit status is vLLM's (an exit code, or ``-S`` when a signal S
killed it), which the failure messages spell out. Neither runs code from the working directory:
the guardian and every Python below it run with ``PYTHONSAFEPATH=1`` (see :func:`safe_python_env`;
Python >= 3.11 honours it, and a script such as the guardian never had the working directory on
its path anyway, only its own folder).

Each engine runs in its own runtime folder (``TMPDIR`` and ``VLLM_RPC_BASE_PATH``: its IPC sockets),
removed after it stops (see ``_rundir.py``). The shared-memory files its processes mapped or held
(recorded by its guardian while it runs, and by ``stop()`` before it signals) and left behind are
removed once nobody maps them; no other file in ``/dev/shm`` is touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx
import psutil

from autotune.engine import _reaper
from autotune.engine._cpu_dtype import launch_argv
from autotune.engine._launch import LaunchSpec
from autotune.engine._logscan import (
    FailureClass,
    KvCapacity,
    classify_failure,
    failure_evidence,
    failure_excerpt,
    parse_kv_capacity,
)
from autotune.engine._oomkill import oom_kill_count
from autotune.engine._ports import PortReservation, free_port, port_is_free, reserve_port
from autotune.engine._rundir import EngineRunDir, attributed_files, read_ledger
from autotune.engine._shm import (
    DEFAULT_ENGINE_SHM_PATTERNS,
    SHM_DIR,
    CleanReport,
    ShmSnapshot,
    remove_unheld,
    shm_files_of,
)
from autotune.errors import EngineCrashed, EngineError, EngineStartError
from autotune.space import RenderedConfig

__all__ = ["EngineProcess", "describe_exit", "free_port", "port_is_free", "safe_python_env"]

log = logging.getLogger(__name__)


def safe_python_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a Python child that must not import from the working directory.

    ``python -m`` and ``python -c`` put the working directory first on ``sys.path``, so a
    ``secrets.py`` or ``json.py`` lying there would run inside vLLM. ``PYTHONSAFEPATH=1``
    (Python >= 3.11, inherited by the processes vLLM spawns) stops that; empty and ``.`` entries
    of ``PYTHONPATH`` mean the working directory too (``PYTHONPATH=:/x`` from ``$PYTHONPATH:/x``),
    so they are dropped.
    """
    safe = {**env, "PYTHONSAFEPATH": "1"}
    if "PYTHONPATH" in safe:
        kept = [p for p in safe["PYTHONPATH"].split(os.pathsep) if p not in ("", ".")]
        if kept:
            safe["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del safe["PYTHONPATH"]
    return safe


def _not_oom(code: int | None, oom_killed: bool | None) -> str:
    """Said of a SIGKILL the kernel's OOM killer did not send (its kill count did not move)."""
    if code in (-9, 137) and oom_killed is False:
        return " (not by the kernel's OOM killer: its kill count did not move)"
    return ""


def describe_exit(returncode: int) -> str:
    """``exited with code 1`` or ``was killed by SIGKILL``, from a ``subprocess`` return code."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"was killed by signal {-returncode}"


_GUARDIAN = Path(__file__).with_name("_guardian.py")


class EngineProcess:
    """A vLLM server for one trial. Use as a context manager; ``stop()`` is idempotent.

    ``startup_stop_grace_s``: how long ``stop()`` waits after SIGTERM before SIGKILL while vLLM
    is still starting (nothing to drain yet; a Ctrl-C during a start should not wait
    ``spec.stop_timeout_s``). ``shm_patterns``: files in ``shm_dir`` that this engine may leave
    besides :data:`DEFAULT_ENGINE_SHM_PATTERNS` (a profile's host pool, e.g. ``cpu_kv_cache_*``).
    """

    def __init__(
        self,
        spec: LaunchSpec,
        rendered: RenderedConfig,
        log_path: Path,
        *,
        port: int | None = None,
        startup_stop_grace_s: float = 3.0,
        shm_patterns: Iterable[str] = (),
        shm_dir: Path = SHM_DIR,
    ):
        self.spec = spec
        self.rendered = rendered
        self.log_path = Path(log_path)
        # held until stop(): no other engine of ours is given this port (None: the caller's port)
        self._reservation: PortReservation | None = None if port else reserve_port(spec.host)
        self.port = self._reservation.port if self._reservation is not None else int(port or 0)
        self.argv = launch_argv(spec, rendered, self.port)  # float32 where the CPU build needs it
        self.startup_stop_grace_s = startup_stop_grace_s
        self.shm_patterns = (*DEFAULT_ENGINE_SHM_PATTERNS, *shm_patterns)
        self.shm_dir = Path(shm_dir)
        self.shm_report: CleanReport | None = None  # what stop() removed from shm_dir
        self._shm_before: ShmSnapshot | None = None
        self.run_dir: EngineRunDir | None = None  # its TMPDIR and IPC sockets, while it runs
        self._proc: subprocess.Popen[bytes] | None = None
        self._oom_kills_at_start: int | None = None
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
            self._shm_before = ShmSnapshot.take(self.shm_dir)
            self.run_dir = run_dir = EngineRunDir.create()
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, str(_GUARDIAN), *self._guardian_options(), "--", *self.argv],
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.PIPE,  # held open by us only: its end-of-file tells the guardian we died
                    env=safe_python_env(self.spec.process_env(self.rendered, run_dir.path)),
                    start_new_session=True,
                    pass_fds=(run_dir.lock_fd,),  # the guardian holds the folder's lock with us
                )
            except BaseException:
                run_dir.remove()
                self.run_dir = None
                raise
        self._pgid = self._proc.pid
        self.started_at = time.monotonic()
        self._oom_kills_at_start = oom_kill_count()
        _reaper.register(self)
        log.debug("started engine pid %s on port %s: %s", self._proc.pid, self.port, " ".join(self.argv))

    def _guardian_options(self) -> list[str]:
        assert self.run_dir is not None
        options = ["--run-dir", str(self.run_dir.path), "--shm-dir", str(self.shm_dir)]
        for pattern in self.shm_patterns:
            options += ["--shm-pattern", pattern]
        return options

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
                    if client.get(self.base_url + "/health").status_code == 200 and self._serves_port():
                        self.ready_at = time.monotonic()
                        self.startup_s = self.ready_at - self.started_at
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self._fail_start(None, timed_out=True)
                time.sleep(poll_s)

    def _serves_port(self) -> bool:
        """Is the server that answered ours? A process of its group listens on the port (False:
        another server answers there, and ours has not bound it yet). True when that cannot be read."""
        listening = psutil.CONN_LISTEN
        try:
            for p in self._group_members():
                for c in p.net_connections(kind="tcp"):
                    if c.status == listening and c.laddr and c.laddr.port == self.port:
                        return True
        except (psutil.AccessDenied, psutil.ZombieProcess):
            return True
        except psutil.Error:
            return False
        return False

    def _release_port(self) -> None:
        reservation, self._reservation = self._reservation, None
        if reservation is not None:
            reservation.release()

    def _fail_start(self, code: int | None, *, timed_out: bool) -> None:
        self.stop()
        text = self.log_text()
        oom = self._oom_killed()
        failure = classify_failure(text, exit_code=code, timed_out=timed_out, oom_killed=oom)
        why = (
            f"was not healthy after {self.spec.startup_timeout_s:.0f} s"
            if code is None
            else f"{describe_exit(code)}{_not_oom(code, oom)} before it was healthy"
        )
        evidence = failure_evidence(text)
        raise EngineStartError(
            f"vLLM {why} ({failure.value}{': ' + evidence if evidence else ''}); log: {self.log_path}",
            failure=failure.value,
            log_tail=failure_excerpt(text),
            log_path=str(self.log_path),
        )

    def _oom_killed(self) -> bool | None:
        """Whether the kernel's OOM killer killed anything since this engine started (None: unknown)."""
        now = oom_kill_count()
        if now is None or self._oom_kills_at_start is None:
            return None
        return now > self._oom_kills_at_start

    def check_alive(self) -> None:
        """Raise :class:`EngineCrashed` if the server died after it was healthy."""
        if self._proc is None:
            return
        code = self._proc.poll()
        if code is not None:
            text = self.log_text()
            oom = self._oom_killed()
            failure = classify_failure(text, exit_code=code, oom_killed=oom)
            evidence = failure_evidence(text)
            raise EngineCrashed(
                f"vLLM {describe_exit(code)}{_not_oom(code, oom)} during the run "
                f"({failure.value}{': ' + evidence if evidence else ''}); log: {self.log_path}",
                failure=failure.value,
                log_tail=failure_excerpt(text),
                log_path=str(self.log_path),
            )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left, wait until the port is free, and remove
        the shared-memory files the engine left that no live process maps.

        The grace between the two signals is ``spec.stop_timeout_s`` for a healthy engine (it may
        be finishing requests) and ``startup_stop_grace_s`` for one still starting up.
        """
        if self._proc is None or self._pgid is None:
            self._release_port()
            return
        members = self._group_members()
        self._record_shm([p.pid for p in members])
        starting = self.ready_at is None
        grace = self.startup_stop_grace_s if starting else self.spec.stop_timeout_s
        if self._proc.poll() is None:
            log.info(
                "stopping vLLM (pid %s%s): SIGTERM, SIGKILL in %g s",
                self._proc.pid,
                ", starting up" if starting else "",
                grace,
            )
        self._signal_group(signal.SIGTERM)
        try:
            self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            (log.info if starting else log.warning)(
                "vLLM (pid %s) still running %g s after SIGTERM; killing its group", self._proc.pid, grace
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
        self._release_port()
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        self._clean_shm()
        _reaper.unregister(self)
        self._pgid = None

    def _record_shm(self, pids: list[int]) -> None:
        """Add to the ledger what the engine's processes map or hold now (the guardian's last
        look may be a second old)."""
        if self.run_dir is None or self._shm_before is None:
            return
        new = {p.name: p for p in self._shm_before.new_entries(self.shm_patterns)}
        with contextlib.suppress(OSError):
            held = shm_files_of(pids, self.shm_dir)
            self.run_dir.record(sorted(e for e in held if Path(e[1]).name in new))

    def _clean_shm(self) -> None:
        """Remove the ledger's files that appeared since the start, match the engine's patterns,
        are still the same files and that nobody maps; then the runtime folder."""
        if self._shm_before is None or self.run_dir is None:
            return
        try:
            new = {p.name for p in self._shm_before.new_entries(self.shm_patterns)}
            shm = os.path.realpath(self.shm_dir)
            ledger = attributed_files(read_ledger(self.run_dir.ledger))
            own = [p for p in ledger if p.name in new and os.path.realpath(p.parent) == shm]
            report = remove_unheld(own)
            deadline = time.monotonic() + 2.0  # the engine's own files: a holder is a process still exiting
            while report.kept_in_use and time.monotonic() < deadline:
                time.sleep(0.2)
                again = remove_unheld(list(report.kept_in_use))
                report = CleanReport(
                    report.removed + again.removed,
                    again.kept_in_use,
                    report.skipped + again.skipped,
                    report.freed_bytes + again.freed_bytes,
                )
            self.shm_report = report
        except OSError as exc:  # never let hygiene hide the trial's own outcome
            log.warning("could not clean %s after vLLM stopped: %s", self.shm_dir, exc)
        finally:
            self.run_dir.remove()
            self.run_dir = None

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

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ += ["FailureClass"]
