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
:func:`check_fingerprint` keeps a worker out of a study made for another space, workload or model,
and :func:`record_devices` stores which devices each worker measures on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import socket
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import GpuLease
from autotune.errors import ConfigError
from autotune.memory import MachineFacts, MachineProbe, read_machine_facts
from autotune.tuning._memory_guard import PP_FLAGS, TP_FLAGS, flag_int
from autotune.tuning._setup import TuningChoices, TuningSetup

__all__ = [
    "CHOICES_ATTR",
    "DEVICES_PREFIX",
    "FINGERPRINT_ATTR",
    "GpuGroup",
    "check_fingerprint",
    "complete_group",
    "engine_gpus",
    "for_gpus",
    "gpu_mix",
    "parse_gpus",
    "plan_groups",
    "record_devices",
    "recorded_choices",
    "study_fingerprint",
]

log = logging.getLogger(__name__)

FINGERPRINT_ATTR = "fingerprint"  # study attr: hashes of the space, workload and model it measures
CHOICES_ATTR = "choices"  # study attr: what it was created with, so a worker needs only its name
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
    largest the space may pick (a tuned flag overrides the fixed one)."""
    fixed = setup.fixed_argv
    sizes = []
    for flags in (TP_FLAGS, PP_FLAGS):
        size = flag_int(fixed, flags) or 1
        for p in setup.space.tunable.values():
            if p.flag in flags:
                values = [int(c) for c in (p.choices or ()) if isinstance(c, int | float)]
                values += [int(p.high)] if p.high is not None else []
                size = max(values, default=size)
        sizes.append(max(size, 1))
    return sizes[0] * sizes[1]


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
        n = workers or 1
        if setup.platform != "cpu" or n == 1:
            return tuple(GpuGroup(slot=i) for i in range(n))
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < n:
            raise ConfigError(
                f"--workers {n}: this machine has {len(cores)} CPU cores (fix: at most {len(cores)})"
            )
        size = len(cores) // n
        return tuple(GpuGroup(slot=i, cpus=tuple(cores[i * size : (i + 1) * size])) for i in range(n))
    facts = read_machine_facts(probe)
    if not facts.gpus:
        why = next((n for n in facts.notes if "GPU" in n), "no NVIDIA GPU visible")
        raise ConfigError(f"--gpus {gpus}: {why} (fix: drop --gpus on a machine without GPUs; use --workers)")
    names = {g.index: g.name for g in facts.gpus}
    wanted = parse_gpus(gpus)
    if wanted is None:
        wanted = _visible(facts, env)
    missing = [g for g in wanted if g not in names]
    if missing:
        raise ConfigError(
            f"--gpus {gpus}: no GPU {', '.join(map(str, missing))} here "
            f"(fix: this machine has {', '.join(map(str, sorted(names)))})"
        )
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

    The argument checker is shared with ``setup``, which closes it (close ``setup``, not this)."""
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
    setup.checker()  # started once, here, so that both setups hold the same one
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


# -- what a worker measures, and on what ------------------------------------------------------
def to_jsonable(value: Any) -> Any:
    """A dataclass (``TuningChoices``, a worker spec) as JSON values; :func:`from_jsonable` reads it back."""
    return json.loads(json.dumps(dataclasses.asdict(value), default=str))


def from_jsonable(tp: Any, value: Any) -> Any:
    """A JSON value back into ``tp`` (dataclasses, tuples, paths and optionals of them)."""
    if value is None:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: from_jsonable(hints[k], v) for k, v in value.items() if k in known})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return from_jsonable(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v) for v in value)
        return tuple(from_jsonable(a, v) for a, v in zip(args, value, strict=False))
    if tp is Path:
        return Path(value)
    return value


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _model_sha(model: str) -> str:
    """config.json and the weight files' names and sizes (not their bytes: tens of GB); a hub name as is."""
    path = Path(model)
    try:
        config = (path / "config.json").read_bytes()
    except OSError:
        return _sha("name", model)
    weights = sorted(
        f"{p.name}:{p.stat().st_size}"
        for pattern in ("*.safetensors", "*.bin", "*.pt")
        for p in path.glob(pattern)
    )
    return _sha(config, *weights)


def study_fingerprint(setup: TuningSetup) -> dict[str, dict[str, str]]:
    """What a study measures, hashed: the space (file, profile, fixed flags), the workload as replayed
    (file, sample, arrivals, warm-up, history) and the model (its config and weight files)."""
    c = setup.choices
    space = setup.space_path.read_bytes() if setup.space_path.exists() else b""
    fixed = " ".join(setup.fixed_argv)
    wl = Path(setup.workload.path)
    wl_bytes = wl.read_bytes() if wl.exists() else b""
    replay = f"sample={c.sample} seed={c.arrivals.seed} arrivals={setup.arrival.describe()} warmup={c.warmup} history={c.history}"
    return {
        "space": {
            "sha": _sha(space, setup.profile.name, fixed),
            "what": f"{setup.space_path.name}, profile {setup.profile.name}, fixed flags {fixed or 'none'}",
        },
        "workload": {
            "sha": _sha(wl_bytes, replay),
            "what": f"{wl.name} ({len(setup.workload)} requests, {setup.arrival.describe()})",
        },
        "model": {"sha": _model_sha(c.model), "what": c.model},
    }


def check_fingerprint(study: optuna.Study, setup: TuningSetup, *, refuse: bool = True) -> list[str]:
    """Refuse to measure into a study made for another space, workload or model (``refuse=False``:
    only return what differs). A study that records none yet gets this setup's fingerprint and
    choices (:data:`CHOICES_ATTR`), so that workers joining later know what to measure."""
    mine = study_fingerprint(setup)
    recorded = study.user_attrs.get(FINGERPRINT_ATTR)
    if not recorded:
        study.set_user_attr(FINGERPRINT_ATTR, mine)
        recorded = study.user_attrs.get(FINGERPRINT_ATTR) or mine
    if CHOICES_ATTR not in study.user_attrs:
        study.set_user_attr(CHOICES_ATTR, to_jsonable(_portable(setup.choices)))
    diffs = [
        f"{key}: the study measures {recorded[key].get('what')} [{recorded[key].get('sha')}], "
        f"this worker {value['what']} [{value['sha']}]"
        for key, value in mine.items()
        if key in recorded and recorded[key].get("sha") != value["sha"]
    ]
    if diffs and refuse:
        raise ConfigError(
            f"study {study.study_name!r} measures something else: {'; '.join(diffs)} "
            "(fix: give this worker the study's space, workload, flags and model, or use a new --study name)"
        )
    return diffs


def _portable(choices: TuningChoices) -> TuningChoices:
    """Paths made absolute (a worker elsewhere finds the same mount points, or says it cannot); the
    compile cache left out (a folder of this host: a worker elsewhere keeps its own)."""
    model = Path(choices.model)
    return dataclasses.replace(
        choices,
        workload=choices.workload.resolve(),
        space=choices.space.resolve() if choices.space else None,
        model=str(model.resolve()) if model.exists() else choices.model,
        preview=False,
        compile_cache=None,
    )


def recorded_choices(study: optuna.Study) -> TuningChoices | None:
    """What the study was created with (None: created by a version that did not record it)."""
    data = study.user_attrs.get(CHOICES_ATTR)
    if not isinstance(data, dict):
        return None
    choices = from_jsonable(TuningChoices, data)
    assert isinstance(choices, TuningChoices)
    return choices


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
