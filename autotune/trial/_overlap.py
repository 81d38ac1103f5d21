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

import time
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.engine import EngineProcess
from autotune.memory import read_machine_facts
from autotune.trial._memory_guard import MemoryGuard

__all__ = ["OVERLAP_MARGIN_BYTES", "PrestartSlot", "Prestarted", "overlap_refusal"]

GiB = 2**30
OVERLAP_MARGIN_BYTES = 2 * GiB  # beyond the next engine's share: CUDA context, allocator slack


def overlap_refusal(guard: MemoryGuard | None, next_argv: Sequence[str]) -> str | None:
    """Why the engine of ``next_argv`` may not start beside the running one (None: it may)."""
    if guard is None:
        return "memory checks are off, so whether two engines fit is unknown"
    verdict = guard.check(next_argv)  # the host and GPU as they are now, the running engine included
    if not verdict.feasible:
        return "; ".join(verdict.reasons)
    if guard.platform != "cuda":
        return None
    facts = read_machine_facts(guard.probe)
    if not facts.gpus:
        return "no GPU memory reading"
    share = guard.sizing(next_argv).gpu_memory_utilization
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

    def discard(self, number: int | None = None) -> None:
        """Stop the engine started ahead (only trial ``number``'s, when given)."""
        if self.pending is None or (number is not None and self.pending.number != number):
            return
        got, self.pending = self.pending, None
        got.proc.stop()
