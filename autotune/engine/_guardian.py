"""Stands between autotune and one vLLM server so that no vLLM process outlives autotune.

autotune starts ``python _guardian.py -- VLLM_ARGV...`` as the leader of a new process group,
with a pipe on stdin that only autotune holds. The guardian becomes a child subreaper (vLLM's
engine-core processes, orphaned when the API server dies, come to it instead of to init), starts
vLLM in its group and then:

- when vLLM exits, it stops whatever vLLM left behind and exits with vLLM's status;
- when the pipe reaches end-of-file -- autotune exited, even by SIGKILL or the OOM killer --
  it SIGTERMs the group, waits, SIGKILLs what is left, and exits.

SIGTERM from autotune (sent to the whole group) is for vLLM: the guardian ignores it and waits.
Standard library only: it must start fast and import nothing of autotune.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36


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
        ppid, group = int(fields[1]), int(fields[2])
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
    _reap()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def main() -> None:
    argv = sys.argv[sys.argv.index("--") + 1 :]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # autotune's group SIGTERM is for vLLM
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    child = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)
    )

    def watch_parent() -> None:
        with contextlib.suppress(OSError):
            while sys.stdin.buffer.read(4096):
                pass
        # End of file: autotune is gone. Nothing may outlive it.
        _stop_everything(grace_s=5.0)
        os._exit(137)

    threading.Thread(target=watch_parent, daemon=True).start()
    code = child.wait()
    _stop_everything(grace_s=3.0)
    if code < 0:  # killed by a signal: die of the same one, so autotune sees what vLLM saw
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
