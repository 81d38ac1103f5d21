"""Shared-memory hygiene: remove files that crashed or killed engines left in /dev/shm.

vllm-ascend's CPUOffloadingConnector keeps its KV pool in ``/dev/shm/cpu_kv_cache_*`` and
leaves the files behind when its process is killed; vLLM's native offload can leave
``vllm_offload_*.mmap`` if it dies while starting. Left alone they hold host memory (tmpfs)
until reboot, and the next trial's pool may not fit. Every vLLM leaves more when it is killed
(SIGKILL of its group, seen with the CPU build 0.32): Python's ``multiprocessing.shared_memory``
segments ``psm_*`` (vLLM's shm_broadcast message queues, torch tensors shared between processes;
160-240 MiB each) and POSIX semaphores ``sem.mp-*``, which their resource tracker would have
removed at a clean exit.

What autotune removes is attributed to its engines (``_rundir.py``): files that appeared since the
engine started (:class:`ShmSnapshot`), match the engine's patterns, are this user's, *and* that the
engine's own processes mapped or held (:func:`shm_files_of`, recorded while it runs), then only
when no live process maps or holds them (:func:`remove_unheld`). Another program's segment,
unmapped for a moment between its steps, is never a candidate.

:func:`clean_new_shm` and :func:`clean_stale_shm` judge by name and time only (anything new, or
anything matching, that nobody maps): on a shared machine they can take another tenant's file, so
autotune no longer calls them; they stay for an operator who knows the machine is theirs. All of
them leave a file that a live process still maps or holds open: every readable ``/proc/PID/maps`` and ``/proc/PID/fd/*`` is checked, by device and
inode (and by path), so a concurrent engine's pool survives. Processes whose ``/proc`` entries
cannot be read even by their owner (non-dumpable ones, such as a sandbox's init) are not seen;
vLLM's processes are ordinary processes of the user who started them, and are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_ENGINE_SHM_PATTERNS",
    "CleanReport",
    "OpenFiles",
    "ShmSnapshot",
    "clean_new_shm",
    "clean_stale_shm",
    "open_files",
    "remove_unheld",
    "shm_files_of",
]

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
_PROC = Path("/proc")
# What any vLLM's processes may leave when killed: multiprocessing.shared_memory segments (Python's
# default name prefix is "psm_"), multiprocessing's POSIX semaphores ("sem.mp-"), vLLM's own files.
DEFAULT_ENGINE_SHM_PATTERNS: tuple[str, ...] = ("psm_*", "sem.mp-*", "vllm*")


@dataclass(frozen=True)
class CleanReport:
    """What :func:`clean_stale_shm` did: files removed, files kept because a process holds them,
    and files left alone for another reason (``(path, why)``)."""

    removed: tuple[Path, ...] = ()
    kept_in_use: tuple[Path, ...] = ()
    skipped: tuple[tuple[Path, str], ...] = ()
    freed_bytes: int = 0

    @classmethod
    def merge(cls, reports: Iterable[CleanReport]) -> CleanReport:
        reports = list(reports)
        return cls(
            tuple(p for r in reports for p in r.removed),
            tuple(p for r in reports for p in r.kept_in_use),
            tuple(s for r in reports for s in r.skipped),
            sum(r.freed_bytes for r in reports),
        )

    def summary(self) -> str:
        return (
            f"removed {len(self.removed)} stale shared-memory file(s) ({self.freed_bytes / 2**30:.2f} GiB), "
            f"kept {len(self.kept_in_use)} in use"
            + (f", skipped {len(self.skipped)}" if self.skipped else "")
        )


@dataclass(frozen=True)
class OpenFiles:
    """Files that live processes map or hold open, as (st_dev, st_ino) and as paths."""

    inodes: frozenset[tuple[int, int]]
    paths: frozenset[str]
    uninspected: frozenset[int]  # pids whose maps or fds could not be read


def _maps_entries(text: str) -> Iterable[tuple[tuple[int, int], str]]:
    """((dev, inode), path) of each file-backed line of a ``/proc/PID/maps``."""
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[4] == "0":
            continue
        major, _, minor = fields[3].partition(":")
        try:
            dev = os.makedev(int(major, 16), int(minor, 16))
            yield (dev, int(fields[4])), fields[5].removesuffix(" (deleted)")
        except ValueError:
            continue


def open_files(proc_root: Path = _PROC) -> OpenFiles:
    """Scan every process under ``proc_root`` for mapped (``maps``) and open (``fd``) files."""
    inodes: set[tuple[int, int]] = set()
    paths: set[str] = set()
    blind: set[int] = set()
    me = os.getpid()
    try:
        pid_dirs = [d for d in proc_root.iterdir() if d.name.isdigit() and int(d.name) != me]
    except OSError:
        pid_dirs = []
    for pid_dir in pid_dirs:
        try:
            for inode, path in _maps_entries((pid_dir / "maps").read_text(errors="replace")):
                inodes.add(inode)
                paths.add(path)
        except PermissionError:
            blind.add(int(pid_dir.name))
        except OSError:
            continue  # exited meanwhile
        try:
            fds = list((pid_dir / "fd").iterdir())
        except PermissionError:
            blind.add(int(pid_dir.name))
            continue
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                st = os.stat(fd)  # follows the link to the open file
                inodes.add((st.st_dev, st.st_ino))
                paths.add(os.readlink(fd).removesuffix(" (deleted)"))
    if blind:
        log.debug("could not inspect processes %s (not dumpable): their files are not seen", sorted(blind))
    return OpenFiles(frozenset(inodes), frozenset(paths), frozenset(blind))


@dataclass(frozen=True)
class ShmSnapshot:
    """The entries of a shared-memory directory at one moment, as (name, inode)."""

    shm_dir: Path
    entries: frozenset[tuple[str, int]]

    @classmethod
    def take(cls, shm_dir: Path = SHM_DIR) -> ShmSnapshot:
        entries: set[tuple[str, int]] = set()
        with contextlib.suppress(OSError), os.scandir(shm_dir) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    entries.add((entry.name, entry.inode()))
        return cls(Path(shm_dir), frozenset(entries))

    def new_entries(self, patterns: Iterable[str]) -> list[Path]:
        """Regular files of this user matching ``patterns`` that were not here (same name and
        inode) when the snapshot was taken. tmpfs reuses inode numbers, so a file removed and
        made again under the same name may look old: it is then left, never wrongly removed."""
        uid = os.geteuid()
        found: set[Path] = set()
        for pattern in patterns:
            for path in self.shm_dir.glob(pattern):
                try:
                    st = path.lstat()
                except OSError:
                    continue
                new = (path.name, st.st_ino) not in self.entries
                if new and st.st_uid == uid and stat.S_ISREG(st.st_mode):
                    found.add(path)
        return sorted(found)


def clean_new_shm(
    before: ShmSnapshot,
    patterns: Iterable[str] = DEFAULT_ENGINE_SHM_PATTERNS,
    *,
    proc_root: Path = _PROC,
    dry_run: bool = False,
) -> CleanReport:
    """Remove the files matching ``patterns`` that appeared in ``before.shm_dir`` since ``before``
    was taken and that no live process maps or holds open (see :func:`clean_stale_shm`).

    Call it after the engine's whole process group is gone (``EngineProcess.stop`` does). A
    segment of a concurrent engine is mapped by it and stays; what this cannot tell apart is a
    file another program of the same user created meanwhile and keeps by name only, unmapped.
    """
    return remove_unheld(before.new_entries(patterns), proc_root=proc_root, dry_run=dry_run)


def clean_stale_shm(
    pattern: str | Iterable[str] = "cpu_kv_cache_*",
    shm_dir: Path = SHM_DIR,
    *,
    proc_root: Path = _PROC,
    dry_run: bool = False,
) -> CleanReport:
    """Remove regular files in ``shm_dir`` matching ``pattern`` (a glob, or several) that no live
    process maps or holds open. ``dry_run`` reports what would be removed, removing nothing.

    Call it while none of this tool's engines is starting: before the study, and after each
    trial's engine has stopped (``EngineProcess.stop`` waits for the whole process group).
    """
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    candidates = sorted({p for pat in patterns for p in Path(shm_dir).glob(pat)})
    return remove_unheld(candidates, proc_root=proc_root, dry_run=dry_run)


def shm_files_of(
    pids: Iterable[int], shm_dir: Path = SHM_DIR, proc_root: Path = _PROC
) -> set[tuple[int, str]]:
    """``(inode, path)`` of the files in ``shm_dir`` that the processes ``pids`` map or hold open."""
    prefix = os.path.realpath(shm_dir) + "/"
    found: set[tuple[int, str]] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            text = (proc_root / str(pid) / "maps").read_text(errors="replace")
            found.update((inode[1], path) for inode, path in _maps_entries(text) if path.startswith(prefix))
        with contextlib.suppress(OSError):
            for fd in (proc_root / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(prefix) and not target.endswith(" (deleted)"):
                        found.add((os.stat(fd).st_ino, target))
    return found


def remove_unheld(
    candidates: Iterable[Path], *, proc_root: Path = _PROC, dry_run: bool = False
) -> CleanReport:
    """Remove the regular files ``candidates`` that no live process maps or holds open."""
    candidates = sorted(set(candidates))
    if not candidates:
        return CleanReport()
    held = open_files(proc_root)
    removed: list[Path] = []
    kept: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    freed = 0
    for path in candidates:
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if not path.is_file() or path.is_symlink():
            skipped.append((path, "not a regular file"))
            continue
        if (st.st_dev, st.st_ino) in held.inodes or str(path.absolute()) in held.paths:
            kept.append(path)
            continue
        if not dry_run:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                skipped.append((path, exc.strerror or str(exc)))
                continue
        removed.append(path)
        freed += st.st_blocks * 512
    report = CleanReport(tuple(removed), tuple(kept), tuple(skipped), freed)
    if removed or skipped:
        log.info("%s%s", "would have " if dry_run else "", report.summary())
    for path, why in skipped:
        log.warning("left %s in place: %s", path, why)
    return report
