"""What the machine has: GPUs (through NVML), host memory, swap and ``/dev/shm``.

Every reading goes through a :class:`MachineProbe`, so tests (and the sampler's tests) can
feed fake readings; :class:`SystemProbe` is the real one. A GPU that NVML cannot see is not
an error: the facts then list no GPU and say why in ``notes``. :class:`GpuSubsetProbe` is a
worker's view: only the GPUs it was given (NVML indices, as ``nvidia-smi`` numbers them).

Host memory may read low on a virtual machine that adds memory as it is used (virtio-mem, or a
memory balloon giving pages back): the lent two-GPU H200 machine read 31 GiB MemTotal at start
for 256 GiB. The facts then carry :attr:`MachineFacts.host_growth`, one sentence saying so, for
whoever derives a limit (the offload-pool cap) from the reading; ``$AUTOTUNE_HOST_MEMORY_GIB``
states the real size instead (it only ever raises the reading).

In a container with a memory limit (a Kubernetes pod's ``resources.limits.memory``, ``docker run
--memory``) the limit is what the kernel's OOM killer enforces, not the node's MemTotal: the host
reading is the cgroup's limit and what is left under it (cgroup v2 ``memory.max`` and
``memory.current``, or v1 ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``), where it is the
smaller. So ``host_share`` of a pod limited to 64 GiB is a share of 64 GiB, on any node.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import psutil

from autotune.memory._host import (
    cgroup_memory_limit,
    has_device,
    online_memory,
    stated_host_memory,
)

__all__ = [
    "DiskSpace",
    "GpuMemory",
    "GpuReading",
    "GpuSubsetProbe",
    "MachineFacts",
    "MachineProbe",
    "SwapReading",
    "SystemProbe",
    "read_machine_facts",
]

_SHM = "/dev/shm"
_NODE0_MEMINFO = "/sys/devices/system/node/node0/meminfo"
_MEMORY_BLOCKS = "/sys/devices/system/memory"
_VIRTIO_MEM = "/sys/bus/virtio/drivers/virtio_mem"
_CGROUP = "/sys/fs/cgroup"
_first_host_total: list[int] = []  # the first MemTotal this process read: growth since is reported


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory in bytes, as NVML reports it at one moment."""

    index: int
    name: str
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class GpuReading:
    """All visible GPUs, or none with ``note`` saying why."""

    gpus: tuple[GpuMemory, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class SwapReading:
    """Swap size and the cumulative bytes swapped in and out since boot."""

    total: int
    used: int
    swapped_in: int
    swapped_out: int


@dataclass(frozen=True)
class DiskSpace:
    total: int
    free: int

    @property
    def used(self) -> int:
        return self.total - self.free


@runtime_checkable
class MachineProbe(Protocol):
    """The one seam to the machine's memory readings."""

    def gpus(self) -> GpuReading: ...

    def host_memory(self) -> tuple[int, int]:
        """Host (total, available) bytes."""
        ...

    def node_memory(self) -> tuple[int, int] | None:
        """NUMA node 0 (total, available) bytes as vLLM's CPU worker reads them; None without NUMA info."""
        ...

    def swap(self) -> SwapReading: ...

    def shm(self) -> DiskSpace | None:
        """``/dev/shm`` space, None when it does not exist."""
        ...

    def tree_rss(self, pid: int) -> int:
        """Resident bytes of ``pid`` and all its descendants (0 once the process is gone)."""
        ...


@dataclass(frozen=True)
class MachineFacts:
    """One reading of the machine's memory. Byte counts throughout; None = not available here."""

    gpus: tuple[GpuMemory, ...]
    host_total: int
    host_available: int
    swap_total: int
    swap_used: int
    swap_in_bytes: int
    swap_out_bytes: int
    shm_total: int | None
    shm_free: int | None
    node_total: int | None = None
    node_available: int | None = None
    notes: tuple[str, ...] = field(default=())
    host_growth: str = ""  # non-empty: host memory may read low here (memory added as used), and why

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus)


class SystemProbe:
    """Real readings: NVML (nvidia-ml-py), psutil and ``os.statvfs``.

    NVML is initialised on first use and kept open until :meth:`close` (the sampler reads it
    several times a second). Any NVML failure means "no GPU", with the reason kept.
    """

    def __init__(
        self,
        shm_path: str = _SHM,
        node_meminfo: str = _NODE0_MEMINFO,
        memory_blocks: str = _MEMORY_BLOCKS,
        virtio_mem: str = _VIRTIO_MEM,
        cgroup: str = _CGROUP,
    ) -> None:
        self._shm_path = shm_path
        self._cgroup = cgroup
        self._node_meminfo = node_meminfo
        self._memory_blocks = memory_blocks
        self._virtio_mem = virtio_mem
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._nvml_error = ""

    def _nvml_module(self) -> Any:
        with self._lock:
            if self._nvml is None and not self._nvml_error:
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    self._nvml = pynvml
                except Exception as exc:  # ImportError or any NVMLError: both mean no GPU to read
                    self._nvml_error = str(exc) or type(exc).__name__
            return self._nvml

    def gpus(self) -> GpuReading:
        nvml = self._nvml_module()
        if nvml is None:
            return GpuReading(note=f"no NVIDIA GPU visible (NVML: {self._nvml_error})")
        try:
            found = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                info = nvml.nvmlDeviceGetMemoryInfo(handle)
                found.append(
                    GpuMemory(
                        index=index,
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        total=int(info.total),
                        free=int(info.free),
                        used=int(info.used),
                    )
                )
        except nvml.NVMLError as exc:
            return GpuReading(note=f"no NVIDIA GPU visible (NVML: {exc})")
        if not found:
            return GpuReading(note="no NVIDIA GPU visible (NVML: 0 devices)")
        return GpuReading(gpus=tuple(found))

    def host_memory(self) -> tuple[int, int]:
        vm = psutil.virtual_memory()
        total, available = int(vm.total), int(vm.available)
        stated = stated_host_memory()
        if stated is not None and stated > total:  # a VM whose MemTotal undercounts: the user says how much
            available += stated - total
            total = stated
        limit = cgroup_memory_limit(Path(self._cgroup))
        if limit is not None and limit[0] < total:  # a container's limit: what the OOM killer enforces
            total, available = limit[0], min(available, max(0, limit[0] - limit[1]))
        return total, available

    def node_memory(self) -> tuple[int, int] | None:
        try:
            text = Path(self._node_meminfo).read_text()
        except OSError:
            return None
        fields: dict[str, int] = {}
        for line in text.splitlines():
            parts = line.split()  # "Node 0 MemTotal:  8742684 kB"
            if len(parts) >= 4 and parts[3].isdigit():
                fields[parts[2].rstrip(":")] = int(parts[3]) * 1024
        keys = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
        if "MemTotal" not in fields or any(k not in fields for k in keys):
            return None
        # vLLM's CPU worker (get_memory_node_info) counts these as available.
        return fields["MemTotal"], sum(fields[k] for k in keys)

    def host_growth(self, total: int) -> str:
        """Why host memory may grow past ``total`` (the MemTotal just read), or "" when nothing says so
        (or the user stated the real size in ``$AUTOTUNE_HOST_MEMORY_GIB``)."""
        if stated_host_memory() is not None:
            return ""
        if not _first_host_total:
            _first_host_total.append(total)
        first = _first_host_total[0]
        online = online_memory(self._memory_blocks)
        reasons = []
        if total > first * 1.05:
            reasons.append(f"MemTotal grew from {first / 2**30:.1f} to {total / 2**30:.1f} GiB since start")
        if has_device(self._virtio_mem):
            reasons.append("memory is hot-plugged as it is used (virtio-mem)")
        if online is not None and online > total * 1.2:
            reasons.append(
                f"{online / 2**30:.1f} GiB is online but MemTotal reads {total / 2**30:.1f} GiB (a memory balloon)"
            )
        return "; ".join(reasons)

    def swap(self) -> SwapReading:
        sw = psutil.swap_memory()
        return SwapReading(
            total=int(sw.total), used=int(sw.used), swapped_in=int(sw.sin), swapped_out=int(sw.sout)
        )

    def shm(self) -> DiskSpace | None:
        try:
            st = os.statvfs(self._shm_path)
        except OSError:
            return None
        return DiskSpace(total=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize)

    def tree_rss(self, pid: int) -> int:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return 0
        total = 0
        for proc in procs:
            try:
                total += int(proc.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # vanished or not ours between listing and reading
        return total

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                # Shutting down a library that already failed is not worth a crash.
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
                self._nvml = None


class GpuSubsetProbe:
    """``inner``'s readings with only the GPUs ``indices`` (NVML numbering): a worker's machine.

    Host memory, swap and ``/dev/shm`` stay the whole host's (workers share them)."""

    def __init__(self, inner: MachineProbe, indices: Sequence[int]) -> None:
        self.inner = inner
        self.indices = tuple(indices)

    def gpus(self) -> GpuReading:
        reading = self.inner.gpus()
        chosen = tuple(g for g in reading.gpus if g.index in self.indices)
        missing = [i for i in self.indices if i not in {g.index for g in reading.gpus}]
        if not missing:
            return GpuReading(gpus=chosen, note=reading.note)
        seen = ", ".join(str(g.index) for g in reading.gpus) or "none"
        return GpuReading(
            gpus=chosen,
            note=f"GPU {', '.join(map(str, missing))} not visible (NVML sees {seen}) {reading.note}".strip(),
        )

    def host_memory(self) -> tuple[int, int]:
        return self.inner.host_memory()

    def node_memory(self) -> tuple[int, int] | None:
        return self.inner.node_memory()

    def swap(self) -> SwapReading:
        return self.inner.swap()

    def shm(self) -> DiskSpace | None:
        return self.inner.shm()

    def tree_rss(self, pid: int) -> int:
        return self.inner.tree_rss(pid)

    def host_growth(self, total: int) -> str:
        growth = getattr(self.inner, "host_growth", None)
        return str(growth(total)) if growth is not None else ""


def read_machine_facts(probe: MachineProbe | None = None) -> MachineFacts:
    """Read the machine once. ``probe`` defaults to a fresh :class:`SystemProbe` (closed after)."""
    own = probe is None
    active: MachineProbe = SystemProbe() if probe is None else probe
    try:
        gpu = active.gpus()
        total, available = active.host_memory()
        node = active.node_memory()
        swap = active.swap()
        shm = active.shm()
        growth_of = getattr(active, "host_growth", None)  # real machines only; test probes need not
        growth = str(growth_of(total)) if growth_of is not None else ""
    finally:
        if own and isinstance(active, SystemProbe):
            active.close()
    notes = [gpu.note] if gpu.note else []
    if shm is None:
        notes.append("/dev/shm is not mounted: no shared-memory pool can be placed there")
    return MachineFacts(
        gpus=gpu.gpus,
        host_total=total,
        host_available=available,
        swap_total=swap.total,
        swap_used=swap.used,
        swap_in_bytes=swap.swapped_in,
        swap_out_bytes=swap.swapped_out,
        shm_total=shm.total if shm else None,
        shm_free=shm.free if shm else None,
        node_total=node[0] if node else None,
        node_available=node[1] if node else None,
        notes=tuple(notes),
        host_growth=growth,
    )
