"""Ports for engines: one per engine, never one that another engine of ours, or a client, may take.

``bind(("", 0))`` hands out a port from the kernel's ephemeral range, and the port is free again
the moment that probe socket closes: until vLLM binds it (seconds later, after its imports) a
client connection of any replay may take it as its local port, and another worker of the same
study may be handed it too. The second engine then fails with "Address already in use" while its
health check reaches the first one's server (seen with four workers on the fake server).

So a port is drawn outside the ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``) and
reserved with an ``flock`` on ``port-N.lock`` in the host's lease directory (the GPU leases'),
held until the engine has stopped: workers of every study on the host skip each other's ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
from pathlib import Path

from autotune.engine._lease import lease_dir

__all__ = ["PortReservation", "free_port", "port_is_free", "reserve_port"]

_LOWEST = 10000  # below this: well-known and registered services' ports
_TRIES = 64


def free_port(host: str = "127.0.0.1") -> int:
    """A free port now, the kernel's pick, reserved by nobody (benchmark servers; engines reserve
    theirs with :func:`reserve_port`)."""
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


def _ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return lo, hi


def candidate_ports(ephemeral: tuple[int, int] | None = None) -> range:
    """The ports an engine may be given: the larger stretch outside the ephemeral range."""
    lo, hi = ephemeral or _ephemeral_range()
    below, above = range(_LOWEST, max(lo, _LOWEST)), range(min(hi + 1, 65536), 65536)
    return below if len(below) >= len(above) else above


class PortReservation:
    """A port held for one engine: an ``flock`` that our other engines respect; :meth:`release`
    when the engine has stopped (the kernel drops it if this process dies)."""

    def __init__(self, port: int, fd: int | None, path: Path | None = None):
        self.port = port
        self._fd = fd
        self._path = path

    def release(self) -> None:
        """Remove the lock file while holding it, then let go (a process that opened it meanwhile
        finds it unlinked and draws another port: see :func:`_lock`)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()
        with contextlib.suppress(OSError):
            os.close(fd)


def _lock(directory: Path, port: int) -> int | None:
    """The reservation's lock, or None when another process holds it (or held it and removed the
    file while we waited: the lock we got is on a file nobody else will open again)."""
    directory.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user of the host
        os.chmod(directory, 0o1777)
    path = directory / f"port-{port}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held, now = os.fstat(fd), os.stat(path)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino):
        os.close(fd)
        return None
    return fd


def reserve_port(host: str = "127.0.0.1", *, directory: Path | None = None) -> PortReservation:
    """A free port outside the ephemeral range, reserved; after ``_TRIES`` taken ones (a host
    whose range leaves no room, an unwritable lease directory), the kernel's pick, unreserved."""
    directory = directory or lease_dir()
    pool = candidate_ports()
    rng = random.SystemRandom()
    for _ in range(_TRIES if len(pool) else 0):
        port = rng.choice(pool)
        try:
            fd = _lock(directory, port)
        except OSError:
            break
        if fd is None:
            continue
        if port_is_free(port, host):
            return PortReservation(port, fd, directory / f"port-{port}.lock")
        os.close(fd)
    return PortReservation(free_port(host), None)
