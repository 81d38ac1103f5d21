"""Stands between autotune and one vLLM server so that no vLLM process outlives autotune.

autotune starts ``python _guardian.py -- VLLM_ARGV...`` as the leader of a new process group,
with a pipe on stdin that only autotune holds. The guardian becomes a child subreaper (vLLM's
engine-core processes, orphaned when the API server dies, come to it instead of to init), starts
vLLM in its group and then:

- when vLLM exits, it stops whatever vLLM left behind and leaves with vLLM's status (below);
- when the pipe reaches end-of-file -- autotune exited, even by SIGKILL or the OOM killer --
  it SIGTERMs the group, waits, SIGKILLs what is left, and exits 137.

Exit status: the guardian's status *is* vLLM's, as ``subprocess`` reports it. vLLM exited with
code N: the guardian exits N. vLLM was killed by signal S: the guardian kills itself with S
(core dumps off), so its parent sees ``returncode == -S``; only if S cannot kill it (never the
case for a signal that killed vLLM) does it exit 128 + S, the shell's convention.

It never lets the interpreter shut down normally: the thread watching the pipe may be inside a
read, and finalising Python then aborts with ``Fatal Python error: _enter_buffered_busy: could not
acquire lock for <_io.BufferedReader name='<stdin>'>`` (status -6, which hid vLLM's own). The pipe
is read with ``os.read`` on the raw descriptor and every way out is ``os._exit``.

Shared memory: every second (and when vLLM exits, and before it stops everything) the guardian
records in ``RUN_DIR/shm-ledger`` the files in the shared-memory folder that its group's processes
and its descendants map or hold open, match the patterns and were not there when it started (see
``_rundir.py``). When autotune is gone it removes those (same inode, unheld) and the runtime
folder itself; otherwise autotune does, after the engine stopped. Options before ``--``:
``--run-dir DIR``, ``--shm-dir DIR`` (default /dev/shm), ``--shm-pattern GLOB`` (repeated).

vLLM is started with ``PYTHONSAFEPATH=1`` whatever the environment says, so neither it nor the
processes it spawns (they inherit the environment) put the working directory on ``sys.path``.

SIGTERM from autotune (sent to the whole group) is for vLLM: the guardian ignores it and waits.
Standard library only: it must start fast and import nothing of autotune.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from typing import NoReturn

PR_SET_CHILD_SUBREAPER = 36
ORPHANED_EXIT = 137  # autotune is gone; nobody reads this status

_leaving = threading.Lock()  # one way out: vLLM's exit or the pipe's end-of-file, whichever is first


def _members() -> list[int]:
    """Processes of our group, and our (adopted) children, other than ourselves."""
    me, pgid = os.getpid(), os.getpgid(0)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid, group = fields[0], int(fields[1]), int(fields[2])
        if state == "Z" and ppid != me:
            continue  # a zombie someone else will reap
        if group == pgid or ppid == me:
            found.append(int(entry))
    return found


def _stop_everything(grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgid(0), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _members() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.1)
    for pid in _members():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.05)
    _reap()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _leave_with(returncode: int) -> NoReturn:
    """Exit with ``returncode`` as ``subprocess`` reports it: N >= 0 an exit code, -S a signal."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if returncode < 0:
        sig = -returncode
        with contextlib.suppress(Exception):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGSEGV/SIGABRT: no core file of ours
        with contextlib.suppress(Exception):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(Exception):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
            signal.raise_signal(sig)
        os._exit(128 + sig)
    os._exit(returncode & 0xFF)


_SCAN_S = 1.0  # how often the engine's processes' shared-memory files are looked at
_shm_dir = "/dev/shm"  # --shm-dir
_patterns: tuple[str, ...] = (
    "psm_*",
    "sem.mp-*",
    "vllm*",
)  # --shm-pattern: torch's, multiprocessing's, vLLM's
_run_dir: str | None = None  # --run-dir: the engine's runtime folder, its ledger's home
_shm_before: set[tuple[str, int]] = set()
_recorded: set[tuple[int, str]] = set()  # (inode, path): what the engine's processes mapped or held
_scan_lock = threading.Lock()


def _shm_prefix() -> str:
    return os.path.realpath(_shm_dir) + "/"


def _matches(name: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(name, p) for p in _patterns)


def _shm_entries() -> set[tuple[str, int]]:
    found = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(_shm_dir):
            if entry.is_file(follow_symlinks=False) and _matches(entry.name):
                with contextlib.suppress(OSError):
                    found.add((entry.name, entry.inode()))
    return found


def _family() -> set[int]:
    """Our group's members and all our descendants (vLLM's processes that left the group too)."""
    me, pgid = os.getpid(), os.getpgid(0)
    parents: dict[int, int] = {}
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            if int(fields[2]) == pgid:
                found.add(int(entry))
    seen, frontier = {me}, {me}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier and pid not in seen}
        seen |= frontier
    return found | (seen - {me})


def _files_held(pids: set[int] | None) -> set[tuple[int, str]]:
    """(inode, path) of the shared-memory files that ``pids`` (None: every process) map or hold."""
    prefix = _shm_prefix()
    if pids is None:
        pids = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    held = set()
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/maps") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(prefix):
                    held.add((int(fields[4]), fields[5].rstrip("\n").removesuffix(" (deleted)")))
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(prefix):
                        held.add((os.stat(f"/proc/{pid}/fd/{fd}").st_ino, target.removesuffix(" (deleted)")))
    return held


def _scan_shm() -> None:
    """Record in the ledger the engine's new shared-memory files (see ``_rundir.py``)."""
    with _scan_lock:
        new = {
            (inode, path)
            for inode, path in _files_held(_family())
            if _matches(os.path.basename(path)) and (os.path.basename(path), inode) not in _shm_before
        } - _recorded
        if not new:
            return
        _recorded.update(new)
        if _run_dir is not None:
            with contextlib.suppress(OSError), open(os.path.join(_run_dir, "shm-ledger"), "a") as fh:
                fh.write("".join(f"{inode} {path}\n" for inode, path in sorted(new)))


def _scan_forever() -> None:
    while True:
        time.sleep(_SCAN_S)
        with contextlib.suppress(Exception):
            _scan_shm()


def _remove_own_shm() -> None:
    """After autotune died (it cannot clean up any more): remove the recorded shared-memory files
    that are still the same file and that no live process maps or holds, then the runtime folder."""
    held = {inode for inode, _ in _files_held(None)}
    for inode, path in _recorded:
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == inode and inode not in held:
                os.unlink(path)
    if _run_dir is not None:
        import shutil

        shutil.rmtree(_run_dir, ignore_errors=True)


def _watch_parent() -> None:
    """Block on the pipe from autotune; at its end-of-file, stop everything and exit."""
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    _leaving.acquire()  # vLLM's exit is being handled: that path exits, this one waits for it
    with contextlib.suppress(Exception):
        _scan_shm()
    _stop_everything(grace_s=5.0)
    with contextlib.suppress(Exception):
        _remove_own_shm()
    os._exit(ORPHANED_EXIT)


def _child_setup() -> None:
    # The guardian ignores SIGTERM and SIGINT; ignored signals survive exec, vLLM must get them.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _parse_options(args: list[str]) -> None:
    """``--run-dir DIR``, ``--shm-dir DIR``, ``--shm-pattern GLOB`` (repeated) before ``--``."""
    global _run_dir, _shm_dir, _patterns
    patterns = []
    for flag, value in zip(args[::2], args[1::2], strict=False):
        if flag == "--run-dir":
            _run_dir = value
        elif flag == "--shm-dir":
            _shm_dir = value
        elif flag == "--shm-pattern":
            patterns.append(value)
    if patterns:
        _patterns = tuple(patterns)


def main() -> NoReturn:
    split = sys.argv.index("--")
    _parse_options(sys.argv[1:split])
    argv = sys.argv[split + 1 :]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # autotune's group SIGTERM is for vLLM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    _shm_before.update(_shm_entries())
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, preexec_fn=_child_setup)
    except OSError as exc:
        print(f"autotune guardian: cannot start {argv[:1]}: {exc}", file=sys.stderr, flush=True)
        _leave_with(127)
    threading.Thread(target=_watch_parent, name="watch-parent", daemon=True).start()
    threading.Thread(target=_scan_forever, name="scan-shm", daemon=True).start()
    while True:
        try:
            returncode = child.wait()
            break
        except InterruptedError:
            continue
    _leaving.acquire()
    with contextlib.suppress(Exception):
        _scan_shm()  # what vLLM's remaining processes (its engine core) still map
    _stop_everything(grace_s=3.0)
    _leave_with(returncode)


if __name__ == "__main__":
    main()
