"""What the kernel says of the host's memory, beside ``/proc/meminfo``: the memory the operator
states (``AUTOTUNE_HOST_MEMORY_GIB``), the memory blocks online (a VM whose memory is hot-plugged),
a virtio-mem device, and this process's memory cgroup limit (a container's real ceiling)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["HOST_MEMORY_ENV", "cgroup_memory_limit", "has_device", "online_memory", "stated_host_memory"]

HOST_MEMORY_ENV = "AUTOTUNE_HOST_MEMORY_GIB"  # the host's real memory, where MemTotal reads low


def stated_host_memory() -> int | None:
    text = os.environ.get(HOST_MEMORY_ENV)
    if not text:
        return None
    try:
        return int(float(text) * 2**30)
    except ValueError:
        return None


def online_memory(blocks_dir: str) -> int | None:
    """Bytes of memory the kernel has online (memory blocks x block size); None when not readable."""
    try:
        block = int(Path(blocks_dir, "block_size_bytes").read_text().strip(), 16)
        online = 0
        for entry in Path(blocks_dir).glob("memory[0-9]*"):
            with contextlib.suppress(OSError):
                if (entry / "state").read_text().strip() == "online":
                    online += block
    except (OSError, ValueError):
        return None
    return online or None


def has_device(driver_dir: str) -> bool:
    """A device is bound to this virtio driver (its directory lists ``virtioN`` links)."""
    try:
        return any(p.name.startswith("virtio") for p in Path(driver_dir).iterdir())
    except OSError:
        return False


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 says "max" for no limit


def cgroup_memory_limit(root: Path) -> tuple[int, int] | None:
    """(limit, usage) in bytes of this process's memory cgroup, or None without a limit: cgroup v2
    (``memory.max``, ``memory.current``), else v1 (``memory/memory.limit_in_bytes``, whose "no limit"
    is a huge number, and ``memory/memory.usage_in_bytes``)."""
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        limit = _read_int(root / limit_file)
        if limit is not None and limit < 2**60:  # v1's unlimited is 2**63 rounded to pages
            return limit, _read_int(root / usage_file) or 0
    return None
