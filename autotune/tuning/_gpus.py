"""Which devices each worker gets, and the setup a worker measures with on them.

``--gpus 0,1,2,3`` (or ``all``) is cut into groups of as many GPUs as one engine needs: one, or
its tensor x pipeline parallel size when the fixed flags set it (``--tensor-parallel-size 2``)
or the space tunes it (the largest value it may take: a trial needs a whole group). Each group is
one worker. GPU numbers are NVML's, as ``nvidia-smi`` shows them; engines are started with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA numbers them the same way.

On a machine without GPUs (the CPU build) several workers split the CPU cores instead: each
engine's OpenMP threads are bound to its own cores (``VLLM_CPU_OMP_THREADS_BIND``), so two
engines do not fight over one core.

:func:`for_gpus` turns the user's setup into a worker's: the engine sees only its GPUs
(``CUDA_VISIBLE_DEVICES``) and carries its lease's token; the memory guard watches those GPUs only.
:func:`record_devices` stores which devices each worker measures on; which study a worker may join
is :mod:`autotune.tuning._fingerprint`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.engine import GpuLease
from autotune.errors import ConfigError
from autotune.memory import MachineFacts, MachineProbe, read_machine_facts
from autotune.tuning._setup import TuningSetup

__all__ = [
    "DEVICES_PREFIX",
    "GpuGroup",
    "complete_group",
    "engine_gpus",
    "for_gpus",
    "gpu_mix",
    "on_gpus",
    "parse_gpus",
    "plan_groups",
    "record_devices",
]

log = logging.getLogger(__name__)

DEVICES_PREFIX = "worker:"  # study attrs worker:HOST:SLOT -> that worker's devices


@dataclass(frozen=True)
class GpuGroup:
    """One worker's devices: GPUs (NVML indices, their names), or CPU cores on a machine without GPUs."""

    slot: int  # the worker's index in the pool: its sampler seed is the run's seed + slot
    gpus: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    cpus: tuple[int, ...] = ()  # CPU cores its engine's threads are bound to (no GPU; empty: not bound)

    def describe(self) -> str:
        if self.gpus:
            label = "GPU" if len(self.gpus) == 1 else "GPUs"
            return f"{label} {','.join(map(str, self.gpus))} ({self.names[0] if self.names else '?'})"
        if self.cpus:
            return f"CPU cores {_ranges(self.cpus)}"
        return "no device assigned"

    def trial_attrs(self) -> dict[str, Any]:
        """Stored on every trial this worker measures: which devices measured it."""
        if not self.gpus:
            return {"worker": self.slot}
        return {
            "worker": self.slot,
            "gpus": list(self.gpus),
            "gpu_name": self.names[0] if self.names else None,
        }


def _ranges(cpus: Sequence[int]) -> str:
    """``0-3,8`` (vLLM's and taskset's syntax)."""
    out: list[str] = []
    start = prev = cpus[0]
    for c in [*cpus[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)


def parse_gpus(text: str) -> tuple[int, ...] | None:
    """``0,1,3`` -> (0, 1, 3); ``all`` -> None (every visible GPU)."""
    text = text.strip()
    if text.lower() == "all":
        return None
    try:
        found = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ConfigError(
            f"--gpus: cannot read {text!r} (fix: GPU numbers as nvidia-smi shows them, e.g. 0,1, or all)"
        ) from None
    if not found or any(g < 0 for g in found) or len(set(found)) != len(found):
        raise ConfigError(f"--gpus: {text!r} must list distinct GPU numbers (fix: e.g. 0,1,2,3 or all)")
    return found


def engine_gpus(setup: TuningSetup) -> int:
    """GPUs one engine may occupy: tensor x pipeline parallel size, each the fixed flag's or the
    largest the space may pick (a flag the user fixed is not tuned)."""
    fixed = setup.sizing().ranks  # as the engine reads the fixed flags (1 where none is set)
    largest: dict[str, int] = {}
    for name, p in setup.space.tunable.items():
        values = [int(c) for c in (p.choices or ()) if isinstance(c, int | float)]
        values += [int(p.high)] if p.high is not None else []
        if values and setup.sizing(setup.config({name: max(values)})).ranks != fixed:
            largest[name] = max(values)  # a parameter that sets a parallel size: its largest value
    return setup.sizing(setup.config(largest)).ranks


def _visible(facts: MachineFacts, env: Mapping[str, str]) -> tuple[int, ...]:
    """NVML's GPUs, less those that ``CUDA_VISIBLE_DEVICES`` hides from this process."""
    indices = tuple(g.index for g in facts.gpus)
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return indices
    try:
        allowed = {int(p) for p in mask.split(",") if p.strip()}
    except ValueError:
        raise ConfigError(
            f"--gpus all: CUDA_VISIBLE_DEVICES={mask!r} names GPUs by UUID or MIG instance "
            "(fix: pass the GPU numbers with --gpus 0,1,...)"
        ) from None
    return tuple(i for i in indices if i in allowed)


def plan_groups(
    setup: TuningSetup,
    gpus: str | None,
    *,
    workers: int | None = None,
    probe: MachineProbe | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[GpuGroup, ...]:
    """The pool's workers. ``gpus``: ``--gpus`` (``0,1`` or ``all``); None: no GPUs, ``workers``
    workers (default 1) splitting the CPU cores when the engine is the CPU build."""
    env = os.environ if env is None else env
    if gpus is None:
        return _cpu_groups(setup, workers or 1)
    facts = read_machine_facts(probe)
    names = _gpu_names(gpus, facts)
    wanted = _wanted(gpus, names, parse_gpus(gpus) or _visible(facts, env))
    size = engine_gpus(setup)
    if len(wanted) < size:
        raise ConfigError(
            f"--gpus {gpus}: one engine needs {size} GPUs (tensor x pipeline parallel), {len(wanted)} given "
            "(fix: give at least that many GPUs, or a smaller --tensor-parallel-size)"
        )
    count = len(wanted) // size
    if len(wanted) % size:
        log.warning(
            "--gpus %s: groups of %d GPUs leave GPU %s unused",
            gpus,
            size,
            ",".join(map(str, wanted[count * size :])),
        )
    if workers is not None:
        count = min(count, workers)
    groups = []
    for i in range(count):
        chosen = tuple(wanted[i * size : (i + 1) * size])
        groups.append(GpuGroup(slot=i, gpus=chosen, names=tuple(names[g] for g in chosen)))
    return tuple(groups)


def _cpu_groups(setup: TuningSetup, n: int) -> tuple[GpuGroup, ...]:
    """``n`` workers without GPUs; on the CPU build, each bound to its share of the CPU cores."""
    if setup.platform != "cpu" or n == 1:
        return tuple(GpuGroup(slot=i) for i in range(n))
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n:
        raise ConfigError(
            f"--workers {n}: this machine has {len(cores)} CPU cores (fix: at most {len(cores)})"
        )
    size = len(cores) // n
    return tuple(GpuGroup(slot=i, cpus=tuple(cores[i * size : (i + 1) * size])) for i in range(n))


def _gpu_names(gpus: str, facts: MachineFacts) -> dict[int, str]:
    """Each GPU's model name by its number; an error when the machine shows none."""
    if not facts.gpus:
        why = next((n for n in facts.notes if "GPU" in n), "no NVIDIA GPU visible")
        raise ConfigError(f"--gpus {gpus}: {why} (fix: drop --gpus on a machine without GPUs; use --workers)")
    return {g.index: g.name for g in facts.gpus}


def _wanted(gpus: str, names: Mapping[int, str], wanted: tuple[int, ...]) -> tuple[int, ...]:
    """``wanted``, checked to be GPUs of this machine."""
    missing = [g for g in wanted if g not in names]
    if missing:
        raise ConfigError(
            f"--gpus {gpus}: no GPU {', '.join(map(str, missing))} here "
            f"(fix: this machine has {', '.join(map(str, sorted(names)))})"
        )
    return wanted


def complete_group(group: GpuGroup, platform: str, probe: MachineProbe | None = None) -> GpuGroup:
    """No GPUs named on a GPU machine: every visible one is the worker's; names read from NVML."""
    if group.cpus or platform != "cuda" or (group.gpus and group.names):
        return group
    names = {g.index: g.name for g in read_machine_facts(probe).gpus}
    gpus = group.gpus or tuple(names)
    missing = [g for g in gpus if g not in names]
    if missing:
        raise ConfigError(
            f"--gpus: no GPU {', '.join(map(str, missing))} here "
            f"(fix: this machine has {', '.join(map(str, names)) or 'none'})"
        )
    return dataclasses.replace(group, gpus=gpus, names=tuple(names[g] for g in gpus))


def gpu_mix(names: Sequence[str]) -> str | None:
    """A warning when the GPUs measuring one study are not all one model, else None."""
    models = sorted(set(names))
    if len(models) <= 1:
        return None
    return (
        f"the study's trials are measured on different GPU models ({', '.join(models)}): figures from "
        "different models are not comparable; each trial records its gpu_name (compare within one model)"
    )


def for_gpus(
    setup: TuningSetup, group: GpuGroup, lease: GpuLease | None = None, *, probe: MachineProbe | None = None
) -> TuningSetup:
    """``setup`` as one worker measures with it: its engine sees only ``group``'s GPUs (or is bound to
    its CPU cores) and carries ``lease``'s token; its memory guard watches those GPUs only.

    The argument checker is shared with ``setup`` (one holder, copied by reference), which closes it
    (close ``setup``, not this)."""
    env = dict(setup.launch.env)
    if group.gpus:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's numbers = NVML's = nvidia-smi's
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, group.gpus))
    if group.cpus and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = _ranges(group.cpus)
    if lease is not None:
        env.update(lease.env())
    guard = setup.guard
    if guard is not None and probe is not None:
        guard = dataclasses.replace(guard, probe=probe)
    if guard is not None and group.gpus:
        guard = guard.for_gpus(group.gpus)
    return dataclasses.replace(setup, launch=dataclasses.replace(setup.launch, env=env), guard=guard)


@contextlib.contextmanager
def on_gpus(
    setup: TuningSetup, gpus: str | None, *, owner: str, probe: MachineProbe | None = None
) -> Iterator[TuningSetup]:
    """``setup`` measuring on one engine's worth of ``gpus`` (``--gpus 1``: GPU 1; a tensor-parallel
    group: its first group), those GPUs leased while the block runs, so that no study's worker
    starts an engine on them meanwhile. ``gpus`` None: ``setup`` as it is."""
    if gpus is None:
        yield setup
        return
    group = plan_groups(setup, gpus, workers=1, probe=probe)[0]
    with GpuLease(group.gpus, owner=owner) as lease:
        yield for_gpus(setup, group, lease, probe=probe)


TENANT_BYTES = 2**30  # a GPU with more than this in use before our engine starts is shared


def record_devices(
    study: optuna.Study, groups: tuple[GpuGroup, ...], facts: MachineFacts | None = None
) -> str | None:
    """Store each worker's devices on the study (with the memory other processes held on its GPUs
    when ``facts`` are given); say, and store, when its GPUs are not one model or are shared."""
    host = socket.gethostname()
    used = {g.index: g.used for g in facts.gpus} if facts is not None else {}
    for g in groups:
        entry: dict[str, Any] = {"gpus": list(g.gpus), "names": list(g.names), "cpus": list(g.cpus)}
        held = {i: used[i] for i in g.gpus if i in used}
        if held:
            entry["used_gib_at_start"] = [round(b / 2**30, 2) for b in held.values()]
        shared = [i for i, b in held.items() if b > TENANT_BYTES]
        if shared:
            note = (
                f"GPU {', '.join(map(str, shared))} on {host} had memory in use before this worker started "
                f"({', '.join(f'{held[i] / 2**30:.1f} GiB' for i in shared)}): another tenant may slow its trials"
            )
            log.warning("%s", note)
            entry["note"] = note
        study.set_user_attr(f"{DEVICES_PREFIX}{host}:{g.slot}", entry)
    names = [
        n
        for key, value in study.user_attrs.items()
        if key.startswith(DEVICES_PREFIX) and isinstance(value, dict)
        for n in value.get("names") or ()
    ]
    mix = gpu_mix(names)
    if mix is not None:
        log.warning("%s", mix)
        study.set_user_attr("gpu_mix", mix)
    return mix
