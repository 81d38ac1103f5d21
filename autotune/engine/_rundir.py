"""Each engine's own runtime folder, and what its processes made in /dev/shm.

vLLM puts its ZMQ IPC sockets in ``VLLM_RPC_BASE_PATH`` (default: the temporary folder; one
``/tmp/<uuid>`` per socket, never unlinked) and its file-store rendezvous and multiprocessing's
folders in ``TMPDIR``. Each engine gets ``<tmp>/autotune-vllm-XXXXXXXX/`` for both (see
``LaunchSpec.process_env``), removed after the engine stops: what piles up is only ever ours.

The folder also holds:

- ``lock``: locked (``flock``) by autotune and by the engine's guardian, which inherits the lock;
  while either lives the folder is in use. :func:`clean_leftover_engines` only touches folders
  whose lock is free (both gone: a ``kill -9`` of autotune and its engine's group at once).
- ``shm-ledger``: the /dev/shm files the engine's processes mapped or held open and that were
  not there when it started (``<inode> <path>`` a line), written by the guardian while the engine
  runs (``_guardian.py``) and by autotune when it stops it. Only these are ever removed, and only
  when still the same file (inode) that no live process maps or holds: a file of another program
  -- another user's vLLM on a shared account -- is never touched, mapped or not.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from autotune.engine._shm import CleanReport, remove_unheld

__all__ = ["PREFIX", "EngineRunDir", "clean_leftover_engines", "read_ledger", "runtime_base"]

log = logging.getLogger(__name__)

PREFIX = "autotune-vllm-"
LOCK = "lock"
LEDGER = "shm-ledger"
_SOCKET_PATH_MAX = 107  # sun_path: 108 bytes with its NUL
_UUID_NAME = 37  # "/" + a uuid4, vLLM's socket name
_FRESH_S = 60.0  # a folder without a lock file younger than this may be being made


def runtime_base() -> Path:
    """Where engines' folders go: the temporary folder, or /tmp when that is too deep for a socket."""
    base = Path(tempfile.gettempdir())
    if len(str(base)) + len(PREFIX) + 8 + _UUID_NAME > _SOCKET_PATH_MAX:
        return Path("/tmp")
    return base


class EngineRunDir:
    """One engine's runtime folder, locked by its maker from creation until :meth:`remove`."""

    def __init__(self, path: Path, lock_fd: int):
        self.path = path
        self.lock_fd = lock_fd

    @classmethod
    def create(cls, base: Path | None = None) -> EngineRunDir:
        path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base or runtime_base()))
        fd = os.open(path / (LOCK + ".new"), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(path / (LOCK + ".new"), path / LOCK)  # never seen unlocked by a cleaner
        return cls(path, fd)

    @property
    def ledger(self) -> Path:
        return self.path / LEDGER

    def record(self, entries: Iterable[tuple[int, str]]) -> None:
        """Add ``(inode, path)`` entries to the ledger."""
        lines = "".join(f"{inode} {path}\n" for inode, path in entries)
        if lines:
            with self.ledger.open("a") as fh:
                fh.write(lines)

    def remove(self) -> None:
        """Remove the folder (sockets and all) and release the lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def read_ledger(ledger: Path) -> set[tuple[int, str]]:
    """The ``(inode, path)`` entries of a ledger; none when it is missing or unreadable."""
    found: set[tuple[int, str]] = set()
    try:
        text = ledger.read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        inode, _, path = line.partition(" ")
        if inode.isdigit() and path.startswith("/"):
            found.add((int(inode), path))
    return found


def attributed_files(entries: Iterable[tuple[int, str]]) -> list[Path]:
    """The ledger's files still there as the same file (inode), regular and this user's."""
    uid = os.geteuid()
    found = []
    for inode, name in entries:
        path = Path(name)
        try:
            st = path.lstat()
        except OSError:
            continue
        if st.st_ino == inode and st.st_uid == uid and path.is_file() and not path.is_symlink():
            found.append(path)
    return sorted(set(found))


def _bound_sockets_under(folder: Path) -> bool:
    """Whether a live process has a Unix socket bound under ``folder`` (``/proc/net/unix``)."""
    prefix = str(folder) + "/"
    try:
        with open("/proc/net/unix") as fh:
            return any(line.rstrip("\n").split(" ")[-1].startswith(prefix) for line in fh)
    except OSError:
        return True  # cannot tell: leave it


def _lock_if_abandoned(folder: Path) -> int | None:
    """A locked descriptor of ``folder``'s lock when nobody holds it any more, else None."""
    try:
        fd = os.open(folder / LOCK, os.O_RDWR)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            if time.time() - folder.stat().st_mtime > _FRESH_S:
                return os.open(os.devnull, os.O_RDONLY)  # made and never locked: its maker died
        return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_leftover_engines(base: Path | None = None, *, proc_root: Path = Path("/proc")) -> CleanReport:
    """Remove what engines of this tool left when they and autotune were killed together: their
    runtime folders under ``base`` and the /dev/shm files their ledgers name (unheld, same inode).
    Folders in use (their lock held) and other users' are left; nothing else is looked at."""
    base = base or runtime_base()
    uid = os.geteuid()
    reports: list[CleanReport] = []
    for folder in sorted(base.glob(PREFIX + "*")):
        with contextlib.suppress(OSError):
            if not folder.is_dir() or folder.is_symlink() or folder.stat().st_uid != uid:
                continue
            fd = _lock_if_abandoned(folder)
            if fd is None:
                continue
            try:
                files = attributed_files(read_ledger(folder / LEDGER))
                reports.append(remove_unheld(files, proc_root=proc_root))
                if not _bound_sockets_under(folder):
                    shutil.rmtree(folder, ignore_errors=True)
                    log.debug("removed the runtime folder %s of an engine that is gone", folder)
            finally:
                os.close(fd)
    return CleanReport.merge(reports)
