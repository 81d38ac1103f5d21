"""One run of a study on one storage at a time, whatever the studies folder or the host.

The lock is keyed by the storage and the study name:

- SQLite: an advisory file lock beside the database file (``one.db`` -> ``one.db.STUDY.lock``), which
  every run of that file takes, from any ``--studies-dir``; the kernel drops it when the process
  dies (SIGKILL, OOM, reboot), so a killed night never blocks the next one. The holder removes the
  file as it releases it (a process that opened it meanwhile sees it is gone and opens a new one).
- PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a connection held for the
  run; the server drops it when the connection does (the process died, the host went away).
- MySQL: ``GET_LOCK`` likewise. Another database: the file lock in the studies folder, with a note.

Parallel workers of one study share it on purpose and do not take this lock (``autotune worker``).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from autotune.errors import StorageError, StudyBusyError
from autotune.study import redact_url, resolve_storage_url

__all__ = ["MAX_WORKER_SLOTS", "StudyLock", "claim_worker_slot"]

log = logging.getLogger(__name__)
_FIX = "fix: wait for it to finish; parallel workers of one study use `autotune worker`"


def _key(name: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory locks, the same for every process."""
    return int.from_bytes(hashlib.sha256(f"autotune-study:{name}".encode()).digest()[:8], "big", signed=True)


def _same_file(fd: int, path: Path) -> bool:
    """Is ``fd`` still the file at ``path`` (not one a releasing holder unlinked)?"""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


class StudyLock:
    """``with StudyLock(storage, name, studies_dir):`` -- a second holder refuses with
    :class:`StudyBusyError` (exit 6)."""

    def __init__(self, storage: str | None, name: str, studies_dir: Path, *, what: str = "study") -> None:
        self.url = resolve_storage_url(storage, name, studies_dir)
        self.name = name
        self.what = what
        self.path: Path | None = None
        if self.url.startswith("sqlite:///"):
            db = Path(self.url.removeprefix("sqlite:///").split("?", 1)[0])
            self.path = db.with_name(f"{db.name}.{name}.lock")
        elif not self.url.startswith(("postgresql", "mysql")):
            self.path = Path(studies_dir) / f".{name}.lock"
        self._fd: int | None = None
        self._conn: Any = None

    def _busy(self, where: str) -> StudyBusyError:
        return StudyBusyError(f"{self.what} {self.name!r} is already running on {where} ({_FIX})")

    def _acquire_file(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise self._busy(f"{redact_url(self.url)} (pid {holder}, lock {path})") from None
            if _same_file(fd, path):
                break
            os.close(fd)  # the holder removed it as it released it (release): lock the new file
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def _acquire_rdb(self) -> None:
        import sqlalchemy

        from autotune.study import open_storage

        open_storage(self.url)  # the study's own checks and messages (unreachable, password) first
        try:
            engine = sqlalchemy.create_engine(self.url, poolclass=sqlalchemy.pool.NullPool)
            conn = engine.connect()
            if self.url.startswith("postgresql"):
                got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(self.name)})
            else:
                got = conn.execute(
                    sqlalchemy.text("SELECT GET_LOCK(:n, 0)"), {"n": f"autotune:{self.name}"[:64]}
                )
            held = bool(got.scalar())
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise StorageError(
                f"cannot lock study {self.name!r} in {redact_url(self.url)}: {str(exc).splitlines()[0]}"
            ) from exc
        if not held:
            conn.close()
            raise self._busy(f"{redact_url(self.url)} (an advisory lock another run holds)")
        self._conn = conn

    def acquire(self) -> None:
        if self.path is not None:
            self._acquire_file(self.path)
        else:
            self._acquire_rdb()

    def release(self) -> None:
        if self._fd is not None:
            if self.path is not None and _same_file(self._fd, self.path):
                self.path.unlink(missing_ok=True)  # removed while held: no lock file left after a run
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        if self._conn is not None:
            try:
                self._conn.close()  # the session ends: the server drops its advisory lock
            except Exception as exc:  # a lost connection has dropped the lock already
                log.debug("closing the lock's connection: %s", exc)
            self._conn = None

    @property
    def held(self) -> bool:
        return self._fd is not None or self._conn is not None

    def __enter__(self) -> StudyLock:
        if not self.held:  # a lock acquired already (a claimed worker slot) is only released on exit
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


MAX_WORKER_SLOTS = 256


def claim_worker_slot(
    storage: str | None, study: str, studies_dir: Path, wanted: int | None = None
) -> tuple[int, StudyLock]:
    """A worker's number, held for its life by a lock keyed like the study's: ``wanted`` (refused with
    exit 6 when another worker holds it), or the lowest free one, so two workers started without
    ``--index`` are never both worker 0 (the baseline's measurer)."""
    slots = [wanted] if wanted is not None else list(range(MAX_WORKER_SLOTS))
    for slot in slots:
        lock = StudyLock(storage, f"{study}.worker-{slot}", studies_dir, what=f"worker {slot} of study")
        try:
            lock.acquire()
        except StudyBusyError:
            if wanted is not None:
                raise
            continue
        return slot, lock
    raise StudyBusyError(f"study {study!r} has {MAX_WORKER_SLOTS} workers already (fix: stop some first)")
