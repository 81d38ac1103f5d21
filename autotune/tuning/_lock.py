"""One run of a study per host at a time: an advisory lock the kernel releases when the process
dies (SIGKILL, OOM, reboot), so a killed night never blocks the next one."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from autotune.errors import StudyBusyError

__all__ = ["StudyLock"]


class StudyLock:
    """``with StudyLock(studies_dir, name):`` -- a second holder refuses with :class:`StudyBusyError`."""

    def __init__(self, studies_dir: Path, name: str, *, what: str = "study") -> None:
        self.path = Path(studies_dir) / f".{name}.lock"
        self.name = name
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StudyBusyError(
                f"{self.what} {self.name!r} is already running on this host (pid {holder}, lock {self.path}) "
                "(fix: wait for it to finish; parallel workers of one study use `autotune worker`)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> StudyLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
