"""Overlapped starts (issue 31, item 4): the next trial's engine starts while the current one
replays, when both fit, so a study spends less of its GPU-hour waiting for vLLM to start.

The checks read the machine *now*, with the current engine's memory already in use: vLLM's own
start-up check needs as much free GPU memory as its share of the GPU (``--gpu-memory-utilization``
of the total), and a start that fails that check would be a failed trial, so the next engine is only
started early when the free memory beside the running one holds its share and a margin. Without
memory checks (``--no-check-memory``, or a hub model with no config.json here) nothing is started
early: the tool cannot tell whether two engines fit.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from autotune.engine import EngineProcess, EngineSizing
from autotune.errors import EngineStartError
from autotune.memory import read_machine_facts
from autotune.trial._memory_guard import MemoryGuard

__all__ = ["OVERLAP_MARGIN_BYTES", "PrestartSlot", "Prestarted", "hidden_start", "overlap_refusal"]

GiB = 2**30
OVERLAP_MARGIN_BYTES = 2 * GiB  # beyond the next engine's share: CUDA context, allocator slack


def overlap_refusal(guard: MemoryGuard | None, sizing: EngineSizing) -> str | None:
    """Why the next engine (its configuration's ``sizing``) may not start beside the running one
    (None: it may)."""
    if guard is None:
        return "memory checks are off, so whether two engines fit is unknown"
    verdict = guard.check(sizing)  # the host and GPU as they are now, the running engine included
    if not verdict.feasible:
        return "; ".join(verdict.reasons)
    if guard.platform != "cuda":
        return None
    facts = read_machine_facts(guard.probe)
    if not facts.gpus:
        return "no GPU memory reading"
    share = sizing.gpu_memory_utilization
    for gpu in facts.gpus:
        need = share * gpu.total + OVERLAP_MARGIN_BYTES
        free = gpu.total - gpu.used
        if free < need:
            return (
                f"GPU {gpu.index} has {free / GiB:.1f} GiB free beside the running engine; the next one "
                f"needs {need / GiB:.1f} GiB (its memory share {share:g} of {gpu.total / GiB:.0f} GiB, "
                f"and {OVERLAP_MARGIN_BYTES // GiB} GiB of margin)"
            )
    return None


def hidden_start(startup_s: float | None, started_at: float, taken_at: float) -> tuple[float, str]:
    """How much of an early engine's start-up ran before its trial took it, and the record's note."""
    total = startup_s or 0.0
    hidden = min(total, taken_at - started_at)
    return (
        hidden,
        f"overlapped start: {hidden:.1f} s of its {total:.1f} s start-up ran while the previous trial replayed",
    )


@dataclass(frozen=True)
class Prestarted:
    """An engine started ahead of its trial: ``number``'s, for the configuration ``key``, started at ``at``."""

    number: int
    key: tuple[object, ...]  # the rendered configuration's args and env
    proc: EngineProcess
    at: float


class PrestartSlot:
    """At most one engine started ahead; stopped unless its own trial takes it."""

    def __init__(self) -> None:
        self.pending: Prestarted | None = None

    def put(self, number: int, key: tuple[object, ...], proc: EngineProcess) -> None:
        self.discard()
        proc.start()
        self.pending = Prestarted(number, key, proc, time.monotonic())

    def take(self, number: int, key: tuple[object, ...]) -> Prestarted | None:
        """The engine started for trial ``number`` with exactly this configuration (any other is stopped)."""
        got, self.pending = self.pending, None
        if got is not None and (got.number != number or got.key != key):
            got.proc.stop()
            return None
        return got

    def wait_ready(self) -> None:
        """Wait until the engine started ahead is up (or has failed: its trial records why). vLLM
        sizes its KV cache from the GPU's free memory during its start, and refuses to start when that
        grows meanwhile ("Error in memory profiling ... other processes ... release GPU memory while
        vLLM is profiling"): measured on the H200 when the trial before stopped its engine then. So the
        running engine is stopped only once the next one is up."""
        if self.pending is None:
            return
        with contextlib.suppress(EngineStartError):  # stopped; its trial records the failure with its log
            self.pending.proc.wait_healthy()

    def discard(self, number: int | None = None) -> None:
        """Stop the engine started ahead (only trial ``number``'s, when given)."""
        if self.pending is None or (number is not None and self.pending.number != number):
            return
        got, self.pending = self.pending, None
        got.proc.stop()
