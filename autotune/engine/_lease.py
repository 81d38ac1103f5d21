"""GPU leases: a GPU of this host is given to one worker (and so to one engine) at a time.

A lease is an ``flock`` on one file per device (``gpuN.lock`` in :func:`lease_dir`), held by the
worker process for its whole life. The kernel drops the lock when that process dies -- SIGKILL,
the OOM killer -- so a crashed worker never blocks its GPUs: the next one takes the lease over
("reclaims" it). Each file also says, as JSON, who holds it (pid, study, a token), so that a
refusal can name the holder and a reclaim can find what the dead holder left running.

The lock lives with the worker, not with its engine (the engine is a child started with
``close_fds``); when a worker dies, its engine's guardian stops the engine a few seconds later.
To never start a second engine on a GPU that the dead one still occupies, the lease's token is
put in each engine's environment (:data:`LEASE_ENV`), and :meth:`GpuLease.acquire`, on reclaiming
a stale lease, waits for the processes carrying the old token to be gone (killing their groups
after ``settle_s``).

The directory is per host: ``/tmp/autotune-gpu-leases`` unless ``$AUTOTUNE_GPU_LEASE_DIR`` says
otherwise (containers that share a host's GPUs must share this directory to see each other). The
engines' port reservations (``port-N.lock``, :mod:`autotune.engine._ports`) live there too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from autotune.errors import StudyBusyError

__all__ = [
    "LEASE_DIR_ENV",
    "LEASE_ENV",
    "GpuLease",
    "LeaseHolder",
    "lease_dir",
    "lease_holders",
    "stop_leftover_engines",
]

log = logging.getLogger(__name__)

LEASE_DIR_ENV = "AUTOTUNE_GPU_LEASE_DIR"
LEASE_ENV = "AUTOTUNE_GPU_LEASE"  # in each engine's environment: the token of the lease it runs under
_DEFAULT_DIR = Path("/tmp/autotune-gpu-leases")


def lease_dir() -> Path:
    return Path(os.environ.get(LEASE_DIR_ENV) or _DEFAULT_DIR)


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds (or last held) a GPU's lease, as its file says."""

    gpu: int
    pid: int
    token: str
    owner: str  # e.g. "study rag-cuda worker 1"
    host: str
    since: float

    def describe(self) -> str:
        since = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"pid {self.pid} ({self.owner or 'autotune'}, since {since})"

    @classmethod
    def parse(cls, gpu: int, text: str) -> LeaseHolder | None:
        try:
            data = json.loads(text)
            return cls(
                gpu=gpu,
                pid=int(data["pid"]),
                token=str(data["token"]),
                owner=str(data.get("owner") or ""),
                host=str(data.get("host") or ""),
                since=float(data.get("since") or 0.0),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _path(directory: Path, gpu: int) -> Path:
    return directory / f"gpu{gpu}.lock"


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user of the host's GPUs
        os.chmod(path.parent, 0o1777)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode(errors="replace").strip()


def lease_holders(gpus: Iterable[int], directory: Path | None = None) -> dict[int, LeaseHolder | None]:
    """The live holder of each GPU's lease (None: free). Takes nothing."""
    directory = directory or lease_dir()
    found: dict[int, LeaseHolder | None] = {}
    for gpu in gpus:
        path = _path(directory, gpu)
        if not path.exists():
            found[gpu] = None
            continue
        fd = _open(path)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                found[gpu] = LeaseHolder.parse(gpu, _read(fd)) or LeaseHolder(gpu, 0, "", "?", "", 0.0)
            else:
                found[gpu] = None
        finally:
            os.close(fd)  # drops the shared lock we may have taken
    return found


class GpuLease:
    """``with GpuLease((0, 1), owner="study s worker 0"):`` -- these GPUs are ours until exit.

    ``acquire`` takes every device or none: a device held by a live process raises
    :class:`StudyBusyError` naming its holder; a stale lease (its holder died) is reclaimed and
    listed in :attr:`reclaimed`.
    """

    def __init__(self, gpus: Sequence[int], *, owner: str = "", directory: Path | None = None) -> None:
        self.gpus = tuple(sorted(set(gpus)))
        self.owner = owner
        self.directory = directory or lease_dir()
        self.token = uuid.uuid4().hex
        self.reclaimed: tuple[LeaseHolder, ...] = ()
        self._fds: dict[int, int] = {}

    @property
    def held(self) -> bool:
        return bool(self._fds) or not self.gpus

    def env(self) -> dict[str, str]:
        """What an engine started under this lease carries in its environment."""
        return {LEASE_ENV: self.token} if self.gpus else {}

    def acquire(self, *, settle_s: float = 30.0) -> GpuLease:
        stale: list[LeaseHolder] = []
        try:
            for gpu in self.gpus:  # in index order: two workers wanting overlapping sets cannot deadlock
                fd = _open(_path(self.directory, gpu))
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = LeaseHolder.parse(gpu, _read(fd))
                    os.close(fd)
                    who = holder.describe() if holder else "another process"
                    raise StudyBusyError(
                        f"GPU {gpu} is leased by {who} (lease {_path(self.directory, gpu)}) "
                        "(fix: give this run other GPUs with --gpus, or wait for that worker to finish)"
                    ) from None
                self._fds[gpu] = fd
                previous = LeaseHolder.parse(gpu, _read(fd))
                if previous is not None and previous.token != self.token:
                    stale.append(previous)  # its holder died holding it: a clean release empties the file
                self._write(fd, gpu)
        except BaseException:
            self.release()
            raise
        self.reclaimed = tuple(stale)
        for holder in stale:
            log.warning(
                "GPU %d: reclaimed the lease of %s, which died holding it", holder.gpu, holder.describe()
            )
        if stale:
            stop_leftover_engines({h.token for h in stale}, settle_s=settle_s)
        return self

    def _write(self, fd: int, gpu: int) -> None:
        data = {
            "pid": os.getpid(),
            "token": self.token,
            "owner": self.owner,
            "host": socket.gethostname(),
            "gpus": list(self.gpus),
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(data).encode())

    def release(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # empty: released cleanly, nothing to reclaim
            with contextlib.suppress(OSError):
                os.close(fd)  # closing drops the flock
        self._fds.clear()

    def __enter__(self) -> GpuLease:
        return self if self._fds else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _carrying(tokens: set[str]) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(LEASE_ENV) in tokens:
                found.append(p)
        except (psutil.Error, OSError):
            continue  # gone, or another user's (whose engines we could not stop anyway)
    return found


def stop_leftover_engines(tokens: set[str], *, settle_s: float = 30.0) -> int:
    """Wait until no process runs under the lease ``tokens`` (the engines of a dead worker, whose
    guardians are stopping them); kill their process groups after ``settle_s``. Returns how many
    were found."""
    left = _carrying(tokens)
    if not left:
        return 0
    log.warning("waiting for %d process(es) of a dead worker's engine to stop", len(left))
    _gone, alive = psutil.wait_procs(left, timeout=settle_s)
    for p in alive:
        with contextlib.suppress(psutil.Error, OSError):
            log.warning("killing leftover engine process %d (group %d)", p.pid, os.getpgid(p.pid))
            os.killpg(os.getpgid(p.pid), signal.SIGKILL)
    psutil.wait_procs(alive, timeout=10)
    return len(left)
