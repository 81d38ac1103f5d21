"""A group of models on one server, assembled: one :class:`~autotune.tuning.TuningSetup` per model
(its workload, space, fixed flags and parser, as a study of that model alone builds them), the
shared budget the group splits (:class:`GroupBudget`), the operator's split (the baseline) and each
model's command under a split.

The budget's parameter leaves each model's own space: the split sets it (``split.NAME``, see
:mod:`autotune.study._split`), so no sample can give the group more than the budget.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from autotune.engine import EngineSizing, budget_flag, fixes_budget
from autotune.errors import AutotuneError, ConfigError
from autotune.memory import GiB, GpuMemory, MachineFacts, read_machine_facts
from autotune.space import SHARE_KEYS, EngineConfig, Role, SearchSpace
from autotune.studyfile import GroupFile, resolve_spec
from autotune.trial import model_max_len
from autotune.tuning._setup import TuningSetup, build_setup

__all__ = ["GroupBudget", "GroupModel", "GroupSetup", "build_group", "share_parameter"]

MiB = 2**20
DEFAULT_GPU_SHARE = 0.92
_GPU, _KV = SHARE_KEYS["gpu_share"], SHARE_KEYS["kv_bytes"]
# share: keys by platform: the ones a platform lacks are refused, with what to write instead
_NOT_ON: dict[str, dict[str, str]] = {
    "cpu": {
        _GPU: "the CPU build has no GPU share (fix: share.kv_cache_memory_bytes, the "
        "group's KV total, e.g. 256M)",
        "host_pool_gb": "the CPU build has no KV-offload pool: its KV cache is host memory already (fix: drop "
        "it; share.kv_cache_memory_bytes is the group's KV total)",
        "host_share": "the CPU build has no KV-offload pool (fix: drop it)",
    },
    "cuda": {
        _KV: "on GPUs the group's budget is its share of each GPU (fix: "
        "share.gpu_memory_utilization, e.g. 0.9)",
    },
}


def share_parameter(space: SearchSpace, role: Role) -> str | None:
    """The parameter of ``space`` with ``role`` (the budget a split decides, or the host pool)."""
    name: str | None = getattr(space.roles, role)
    return name


@dataclass(frozen=True)
class GroupBudget:
    """The shared budget the split divides: on the CPU build the group's KV bytes, on GPUs its share
    of each GPU. A model's value is rounded down (MiB, or 0.001 of the GPU): never past the budget."""

    role: Role  # gpu_share or kv_bytes
    total: float

    @property
    def flag(self) -> str:
        """The flag that gives one engine its part of this budget (the engine knows its spelling)."""
        return budget_flag(self.role)

    @property
    def key(self) -> str:
        """The group file's ``share:`` key of this budget."""
        return SHARE_KEYS[self.role]

    def value(self, fraction: float) -> str:
        if self.role == "kv_bytes":
            return f"{math.floor(self.total * fraction / MiB)}M"
        return f"{math.floor(self.total * fraction * 1000) / 1000:.3f}"

    def used(self, fraction: float) -> float:
        """What a model's share takes of the budget, as rendered (bytes, or a share of the GPU)."""
        if self.role == "kv_bytes":
            return float(math.floor(self.total * fraction / MiB) * MiB)
        return math.floor(self.total * fraction * 1000) / 1000

    def describe(self, fraction: float) -> str:
        if self.role == "kv_bytes":
            return f"{math.floor(self.total * fraction / MiB)} MiB"
        return f"{self.flag} {self.value(fraction)}"

    def total_text(self) -> str:
        if self.role == "kv_bytes":
            return f"{self.total / MiB:g} MiB of KV (share.{self.key})"
        return f"{self.total:g} of each GPU (share.{self.key})"


@dataclass(frozen=True)
class GroupModel:
    """One engine of the group: its setup (the budget's parameter out of its space) and its weight."""

    name: str
    weight: float
    setup: TuningSetup
    max_model_len: int | None

    def argv(
        self, budget: GroupBudget, fraction: float, values: Mapping[str, Any], port: int = 0
    ) -> list[str]:
        """Its full command (launcher included) under a split and a configuration of its own space."""
        return self.setup.engine.argv(self.setup.launch, self.config(budget, fraction, values), port)

    def config(self, budget: GroupBudget, fraction: float, values: Mapping[str, Any]) -> EngineConfig:
        """Its configuration: its own values, and its share of the budget by the budget's role."""
        return self.setup.config(values).with_role(budget.role, budget.used(fraction))

    def sizing(self, budget: GroupBudget, fraction: float, values: Mapping[str, Any]) -> EngineSizing:
        """What it asks of memory under a split, as the engine reads its configuration."""
        return self.setup.sizing(self.config(budget, fraction, values))

    def infeasible(
        self,
        budget: GroupBudget,
        fraction: float,
        values: Mapping[str, Any],
        facts: MachineFacts | None = None,
    ) -> str | None:
        """Why this model cannot run under this share before anything starts (None: it can, or no
        memory estimate): its KV must hold one request of its ``max_model_len``."""
        guard = self.setup.guard
        if guard is None:
            return None
        verdict = guard.check(self.sizing(budget, fraction, values), facts)
        est = verdict.estimate
        if est is not None and not est.fits_one_request:
            return (
                f"{self.name}: its share ({budget.describe(fraction)}) holds {est.kv_tokens:,} KV tokens, "
                f"less than one request of max_model_len {est.max_model_len:,}"
            )
        return f"{self.name}: {'; '.join(verdict.reasons)}" if verdict.reasons else None


def gpus_over(shares: Mapping[str, float], gpus: Sequence[GpuMemory]) -> str | None:
    """Why the engines' GPU shares, started together, pass a GPU's free memory as NVML reads it now
    (each engine's own check sees the whole free memory; together they need the sum). None: they fit."""
    want = sum(shares.values())
    for g in gpus:
        if g.total and want * g.total > g.free:
            parts = " + ".join(f"{n} {s:.3f}" for n, s in shares.items())
            return (
                f"the group's GPU shares ({parts} = {want:.3f} of GPU {g.index}'s {g.total / GiB:.1f} GiB: "
                f"{want * g.total / GiB:.1f} GiB) pass its free memory now ({g.free / GiB:.1f} GiB, NVML): each "
                "engine alone would start, together they would not (fix: a smaller share.gpu_memory_utilization, "
                "or free the GPU)"
            )
    return None


@dataclass(frozen=True)
class GroupSetup:
    """The group's models (in file order), the budget they split and the baseline's split."""

    file: GroupFile
    models: tuple[GroupModel, ...]
    budget: GroupBudget
    baseline: Mapping[str, float]  # each model's fraction of the budget (sum <= 1)
    baseline_source: str  # "share.baseline" or "equal split"
    platform: Literal["cuda", "cpu"]
    host_pool_gib: float | None = None  # the group's total for KV-offload pools (None: no pool here)
    notes: tuple[str, ...] = field(default=())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    def infeasible(
        self, split: Mapping[str, float], values: Mapping[str, Mapping[str, Any]] | None = None
    ) -> tuple[str, ...]:
        """Why a split (and each model's configuration) cannot run, one reason per model that cannot."""
        if not any(m.setup.guard is not None for m in self.models):
            return ()
        facts = read_machine_facts(self.models[0].setup.guard.probe if self.models[0].setup.guard else None)
        reasons = [
            m.infeasible(self.budget, split[m.name], (values or {}).get(m.name, {}), facts)
            for m in self.models
        ]
        together = None
        if self.budget.role == "gpu_share":
            together = gpus_over({m.name: self.budget.used(split[m.name]) for m in self.models}, facts.gpus)
        return tuple(r for r in [*reasons, self.pools_over(values or {}), together] if r)

    def pools_over(self, values: Mapping[str, Mapping[str, Any]]) -> str | None:
        """Why the models' KV-offload pools together pass the group's host budget (None: they do not)."""
        pools = {}
        for m in self.models:
            param = share_parameter(m.setup.space, "kv_pool")
            own = values.get(m.name, {})
            if param is not None and own.get(param):
                pools[m.name] = float(own[param])
        if self.host_pool_gib is None or sum(pools.values()) <= self.host_pool_gib:
            return None
        shown = ", ".join(f"{n} {v:g}" for n, v in pools.items())
        return f"the KV-offload pools ({shown} GiB) pass the group's host pool of {self.host_pool_gib:g} GiB"

    def describe_split(self, split: Mapping[str, float]) -> str:
        parts = [f"{n} {split[n]:.2f} ({self.budget.describe(split[n])})" for n in self.names]
        return f"split of {self.budget.total_text()}: " + ", ".join(parts)


def _budget(group: GroupFile, platform: Literal["cuda", "cpu"]) -> GroupBudget:
    share = group.share
    for key, why in _NOT_ON[platform].items():
        if getattr(share, key) is not None:
            raise ConfigError(f"{group.where(f'share.{key}')}: share.{key}: {why}")
    if platform == "cpu":
        if share.kv_cache_memory_bytes is None:
            raise ConfigError(
                f"{group.where('share')}: share.kv_cache_memory_bytes is required on the CPU build: the group's KV "
                "total, which the models split (fix: e.g. share: {kv_cache_memory_bytes: 256M})"
            )
        return GroupBudget("kv_bytes", float(share.kv_cache_memory_bytes))
    total = share.gpu_memory_utilization if share.gpu_memory_utilization is not None else DEFAULT_GPU_SHARE
    return GroupBudget("gpu_share", total)


def _baseline(group: GroupFile, budget: GroupBudget) -> tuple[dict[str, float], str]:
    given = group.share.baseline
    if given is None:
        return {n: 1.0 / len(group.names) for n in group.names}, "equal split"
    if budget.role == "gpu_share":  # given as each engine's share of the GPU
        total = sum(given.values())
        if total > budget.total + 1e-9:
            raise ConfigError(
                f"{group.where('share.baseline')}: share.baseline: the shares sum to {total:g}, above the group's "
                f"share.gpu_memory_utilization {budget.total:g} (fix: shares within the group's share)"
            )
        return {n: given[n] / budget.total for n in group.names}, "share.baseline"
    return {n: given[n] for n in group.names}, "share.baseline"


def _without_budget(name: str, setup: TuningSetup, budget: GroupBudget, group: GroupFile) -> TuningSetup:
    """The model's setup with the budget's parameter out of its space (the split sets it)."""
    if fixes_budget(setup.fixed, budget.role):
        raise ConfigError(
            f"{group.where(f'models.{name}')}: models.{name}.engine_args: {budget.flag} is the group's split "
            f"(fix: drop it; set share.{budget.key} and share.baseline)"
        )
    param = share_parameter(setup.space, budget.role)
    if param is None:
        return setup
    params = {k: v for k, v in setup.space.parameters.items() if k != param}
    clipped = tuple(c for c in setup.clipped if not c.startswith(f"not searched: {param} "))
    return replace(setup, space=setup.space.model_copy(update={"parameters": params}), clipped=clipped)


@contextmanager
def build_group(group: GroupFile, flags: Mapping[str, Any]) -> Iterator[GroupSetup]:
    """Each model's setup (its errors named by model), the budget for the platform and the baseline
    split; every setup's argument checker is closed on exit."""
    for key in ("model", "workload"):
        if key in flags:
            raise ConfigError(
                f"--{key}: {group.path} is a study of several models (models:): each entry names its own {key} "
                f"(fix: drop --{key}, or change the entry in {group.path})"
            )
    _refuse_unused(group, flags)
    with contextlib.ExitStack() as stack:
        setups: list[tuple[str, float, TuningSetup]] = []
        for member in group.members:
            spec = resolve_spec("run", flags=flags, file=group.member_file(member))
            try:
                setups.append((member.name, member.weight, stack.enter_context(build_setup(spec))))
            except AutotuneError as exc:
                raise type(exc)(f"model {member.name}: {exc}") from exc
        _capacity_in_step(group, setups)
        platform = setups[0][2].platform
        budget = _budget(group, platform)
        baseline, source = _baseline(group, budget)
        models = tuple(
            GroupModel(name, weight, _without_budget(name, s, budget, group), model_max_len(s.model, s.fixed))
            for name, weight, s in setups
        )
        yield GroupSetup(
            file=group,
            models=models,
            budget=budget,
            baseline=baseline,
            baseline_source=source,
            platform=platform,
            host_pool_gib=_host_pool(group, platform, setups[0][2].choices.host_share),
            notes=_notes(platform, [s.profile_note for _, _, s in setups]),
        )


# What a one-engine study does that a group study does not (yet): given, each is refused by name
# rather than silently dropped. Values equal to what the group does anyway pass.
_NOT_FOR_A_GROUP: dict[str, tuple[object, str]] = {
    "workers": (1, "a group trial is the whole machine, every engine of the group on it, so group trials run "
                "one at a time (fix: drop --workers)"),
    "total_trials": (None, "group trials run one at a time, without workers (fix: --n-trials)"),
    "gpus": (None, "the group's engines share the GPUs this process sees, as they will in production (fix: "
             "CUDA_VISIBLE_DEVICES)"),
    "prune": (False, "a group trial replays every model's workload to its end: nothing is pruned (fix: drop "
              "--prune)"),
    "overlap_starts": (False, "the group's engines start once per trial, together or one at a time (fix: drop "
                       "--overlap-starts)"),
    "timeout": (None, "not built for a group study yet: bound it with --n-trials (fix: drop --timeout)"),
    "accept_reference": (False, "the baseline group is each model's fixed flags at the baseline split, never a "
                         "reference (fix: drop --accept-reference)"),
    "predict": (False, "the latency model predicts one engine, not engines sharing a GPU, yet (fix: drop "
                "--predict)"),
}  # fmt: skip


def _capacity_in_step(group: GroupFile, setups: Sequence[tuple[str, float, TuningSetup]]) -> None:
    """A group's capacity is one multiplier of every model's workload (the group trial's doc), so
    either every model brackets its capacity or none does."""
    objectives = {name: s.objective for name, _, s in setups}
    capacity = [name for name, o in objectives.items() if o.is_capacity]
    other = next((name for name, o in objectives.items() if not o.is_capacity), None)
    if capacity and other is not None:
        raise ConfigError(
            f"{group.path}: models.{other}: objective {objectives[other].metric} beside {capacity[0]}'s "
            "capacity: a group's capacity is the load every model holds at once (fix: one objective for "
            "every model, at the top of the file)"
        )


def _refuse_unused(group: GroupFile, flags: Mapping[str, Any]) -> None:
    for key, (harmless, why) in _NOT_FOR_A_GROUP.items():
        given = flags.get(key, group.common.values.get(key))
        if given is None or given == harmless:
            continue
        shown = "" if isinstance(given, bool) else f" {given}"
        if key in flags:
            where = f"--{key.replace('_', '-')}{shown}: {group.path}"
        else:
            where = f"{group.path}:{group.common.lines.get(key, '?')}: {key}:{shown or ' true'}: this file"
        raise ConfigError(f"{where} is a study of several models on one server: {why}")


def _notes(platform: str, profile_notes: Sequence[str | None]) -> tuple[str, ...]:
    notes = tuple(dict.fromkeys(n for n in profile_notes if n))
    if platform == "cuda" and not notes and not read_machine_facts().has_gpu:
        notes = ("this machine has no GPU: the commands are what a GPU host would launch",)
    return notes


def _host_pool(group: GroupFile, platform: str, host_share: float) -> float | None:
    """The group's total for KV-offload pools in GiB: ``share.host_pool_gb``, else ``share.host_share``
    (default ``--host-share``) of the host's available memory; None on the CPU build (no pool)."""
    if platform == "cpu":
        return None
    if group.share.host_pool_gb is not None:
        return group.share.host_pool_gb
    share = group.share.host_share if group.share.host_share is not None else host_share
    return round(share * read_machine_facts().host_available / 2**30, 1)


def equal_split(names: Sequence[str]) -> dict[str, float]:
    return {n: 1.0 / len(names) for n in names}


__all__ += ["equal_split"]
