"""Shared-memory hygiene: remove host-pool files that crashed engines left in /dev/shm.

vllm-ascend's CPUOffloadingConnector keeps its KV pool in ``/dev/shm/cpu_kv_cache_*`` and
leaves the files behind when its process is killed; vLLM's native offload can leave
``vllm_offload_*.mmap`` if it dies while starting. Left alone they hold host memory (tmpfs)
until reboot, and the next trial's pool may not fit.

:func:`clean_stale_shm` removes such files, but never one that a live process still maps or
holds open: every readable ``/proc/PID/maps`` and ``/proc/PID/fd/*`` is checked, by device and
inode (and by path), so a concurrent engine's pool survives. Processes whose ``/proc`` entries
cannot be read even by their owner (non-dumpable ones, such as a sandbox's init) are not seen;
vLLM's processes are ordinary processes of the user who started them, and are.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CleanReport", "OpenFiles", "clean_stale_shm", "open_files"]

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
_PROC = Path("/proc")


@dataclass(frozen=True)
class CleanReport:
    """What :func:`clean_stale_shm` did: files removed, files kept because a process holds them,
    and files left alone for another reason (``(path, why)``)."""

    removed: tuple[Path, ...] = ()
    kept_in_use: tuple[Path, ...] = ()
    skipped: tuple[tuple[Path, str], ...] = ()
    freed_bytes: int = 0

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
        log.info("%s%s in %s", "would have " if dry_run else "", report.summary(), shm_dir)
    for path, why in skipped:
        log.warning("left %s in place: %s", path, why)
    return report
