"""Measured memory during a run: peaks sampled in a background thread.

``with MemorySampler(pid) as sampler: ...`` reads, every ``interval`` seconds, GPU memory used
per device, the resident size of ``pid`` and all its descendants, ``/dev/shm`` use and the
host's swap counters; ``sampler.result()`` (or the value of ``__exit__``'s sampler) is a frozen
:class:`MemoryPeak`. A peak shorter than the interval can be missed: the figures are lower bounds.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from autotune.memory._estimate import GiB, MiB
from autotune.memory._machine import MachineFacts, MachineProbe, SwapReading, SystemProbe

__all__ = [
    "GPU_FULL_MARGIN_BYTES",
    "HOST_FULL_SHARE",
    "MemoryPeak",
    "MemorySampler",
    "memory_constraint_violations",
]

logger = logging.getLogger(__name__)

# A GPU whose peak comes this close to its physical total ran out of memory (or nearly).
GPU_FULL_MARGIN_BYTES = 256 * MiB
# A process tree whose resident peak reaches this share of host memory left nothing to spare.
HOST_FULL_SHARE = 0.95


@dataclass(frozen=True)
class MemoryPeak:
    """What a run used at its highest, in bytes; swap figures are totals over the run."""

    gpu_used_peak: tuple[int, ...]
    gpu_total: tuple[int, ...]
    rss_peak: int
    swap_in_bytes: int
    swap_out_bytes: int
    shm_used_peak: int | None
    samples: int
    duration_s: float


class MemorySampler:
    """Samples one process tree's memory and the machine's in a daemon thread.

    The first reading is taken in ``start`` (so swap counters have a baseline even for a
    very short run) and the last in ``stop``.
    """

    def __init__(self, pid: int, probe: MachineProbe | None = None, *, interval: float = 0.25) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._pid = pid
        self._own_probe = probe is None
        self._probe: MachineProbe = SystemProbe() if probe is None else probe
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._gpu_peak: list[int] = []
        self._gpu_total: list[int] = []
        self._rss_peak = 0
        self._shm_peak: int | None = None
        self._swap_start: SwapReading | None = None
        self._swap_last: SwapReading | None = None
        self._samples = 0
        self._started = 0.0
        self._duration = 0.0

    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("MemorySampler already started")
        self._started = time.monotonic()
        self._swap_start = self._probe.swap()
        self._sample()
        self._thread = threading.Thread(target=self._run, name=f"memory-sampler-{self._pid}", daemon=True)
        self._thread.start()

    def stop(self) -> MemoryPeak:
        if self._thread is not None and not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._sample()
            self._duration = time.monotonic() - self._started
            if self._own_probe and isinstance(self._probe, SystemProbe):
                self._probe.close()
        return self.result()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sample()
            except Exception:  # a failed reading must not kill the run it measures
                logger.warning("memory sample of pid %d failed", self._pid, exc_info=True)

    def _sample(self) -> None:
        gpus = self._probe.gpus().gpus
        rss = self._probe.tree_rss(self._pid)
        shm = self._probe.shm()
        swap = self._probe.swap()
        with self._lock:
            if len(self._gpu_peak) < len(gpus):
                self._gpu_peak.extend([0] * (len(gpus) - len(self._gpu_peak)))
                self._gpu_total.extend([0] * (len(gpus) - len(self._gpu_total)))
            for i, gpu in enumerate(gpus):
                self._gpu_peak[i] = max(self._gpu_peak[i], gpu.used)
                self._gpu_total[i] = gpu.total
            self._rss_peak = max(self._rss_peak, rss)
            if shm is not None:
                self._shm_peak = max(self._shm_peak or 0, shm.used)
            self._swap_last = swap
            self._samples += 1

    def result(self) -> MemoryPeak:
        """The peaks so far (final once stopped)."""
        with self._lock:
            start, last = self._swap_start, self._swap_last
            swap_in = max(last.swapped_in - start.swapped_in, 0) if start and last else 0
            swap_out = max(last.swapped_out - start.swapped_out, 0) if start and last else 0
            duration = self._duration or (time.monotonic() - self._started if self._started else 0.0)
            return MemoryPeak(
                gpu_used_peak=tuple(self._gpu_peak),
                gpu_total=tuple(self._gpu_total),
                rss_peak=self._rss_peak,
                swap_in_bytes=swap_in,
                swap_out_bytes=swap_out,
                shm_used_peak=self._shm_peak,
                samples=self._samples,
                duration_s=duration,
            )


def memory_constraint_violations(
    peak: MemoryPeak, facts: MachineFacts, *, allow_swap: bool = False
) -> tuple[str, ...]:
    """Why a finished run's memory use disqualifies its configuration (empty: it does not).

    - the host swapped during the run (unless ``allow_swap``): latency figures are then the disk's;
    - a GPU peaked within ``GPU_FULL_MARGIN_BYTES`` of its physical total;
    - the process tree's resident peak reached ``HOST_FULL_SHARE`` of host memory.
    """
    found: list[str] = []
    if not allow_swap and (peak.swap_in_bytes or peak.swap_out_bytes):
        found.append(
            f"the host swapped during the run ({peak.swap_in_bytes / MiB:.1f} MiB in, "
            f"{peak.swap_out_bytes / MiB:.1f} MiB out): the configuration needs more host memory than is free"
        )
    for index, (used, total) in enumerate(zip(peak.gpu_used_peak, peak.gpu_total, strict=False)):
        if total and used >= total - GPU_FULL_MARGIN_BYTES:
            found.append(
                f"GPU {index} peaked at {used / GiB:.2f} GiB of its {total / GiB:.2f} GiB: "
                "it ran out of memory"
            )
    if facts.host_total and peak.rss_peak >= HOST_FULL_SHARE * facts.host_total:
        found.append(
            f"the engine's processes peaked at {peak.rss_peak / GiB:.2f} GiB resident, "
            f"{peak.rss_peak / facts.host_total:.0%} of the host's {facts.host_total / GiB:.2f} GiB"
        )
    return tuple(found)
