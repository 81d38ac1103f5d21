"""How many processes the kernel's OOM killer has killed, read before an engine starts and after it
died: an engine killed by SIGKILL is out of memory only if the count rose meanwhile; otherwise
something else killed it (a user, a job scheduler, a test), and the trial is not blamed on its
memory settings.

The count comes from the engine's cgroup when the kernel says (cgroup v2 ``memory.events``, v1
``memory.oom_control``: both ``oom_kill N``), else from the whole host (``/proc/vmstat``, Linux
4.13+), where another process's OOM kill in the same window would count too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["OOM_KILL_SOURCES", "oom_kill_count"]

OOM_KILL_SOURCES: tuple[Path, ...] = (
    Path("/sys/fs/cgroup/memory.events"),
    Path("/sys/fs/cgroup/memory/memory.oom_control"),
    Path("/proc/vmstat"),
)
_COUNT = re.compile(r"^oom_kill (\d+)$", re.MULTILINE)


def oom_kill_count(sources: Sequence[Path] = OOM_KILL_SOURCES) -> int | None:
    """The first source's ``oom_kill`` count (None: none of them is readable here)."""
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = _COUNT.search(text)
        if m:
            return int(m[1])
    return None
