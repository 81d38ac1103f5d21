"""``autotune run -f group.yaml --dry-run``: every engine's exact command and the split, for the
baseline group, the prior's first split and sampled trials; each command checked by the installed
vLLM's own parser and the split by the one-request rule. Nothing launched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.study import suggest_member, suggest_split
from autotune.tuning._dry_run import _env_shown
from autotune.tuning.group._setup import GroupSetup

__all__ = ["EnginePreview", "GroupPreview", "preview_group"]


@dataclass(frozen=True)
class EnginePreview:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]  # what autotune adds to the environment; secrets masked
    parser_error: str | None  # None: vLLM's parser accepts it (or no parser was asked)
    checked: bool


@dataclass(frozen=True)
class GroupPreview:
    label: str
    split: Mapping[str, float]  # each model's fraction of the budget
    values: Mapping[str, Mapping[str, Any]]  # each model's configuration of its own space
    engines: tuple[EnginePreview, ...]
    infeasible: tuple[str, ...]  # why it cannot run, per model (empty: it can)
    budget_used: float  # the models' values summed, in the budget's unit


def _sampled(
    group: GroupSetup, samples: int, seed: int
) -> list[tuple[str, dict[str, float], dict[str, Any]]]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))  # in memory
    out = []
    for i in range(samples):
        trial = study.ask()
        split = suggest_split(trial, group.names)
        values = {m.name: suggest_member(trial, m.name, m.setup.space) for m in group.models}
        study.tell(trial, 0.0)
        out.append((f"sample {i + 1}", split, values))
    return out


def preview_group(
    group: GroupSetup, *, samples: int, seed: int, first: Mapping[str, float] | None = None
) -> list[GroupPreview]:
    """The baseline group, the prior's ``first`` split (when given) and ``samples`` random trials."""
    configs: list[tuple[str, Mapping[str, float], Mapping[str, Any]]] = [
        (f"baseline ({group.baseline_source}, each model's fixed flags)", group.baseline, {})
    ]
    if first is not None:
        configs.append(("prior's first split (each model's fixed flags)", first, {}))
    configs += _sampled(group, samples, seed)
    checker = group.models[0].setup.checker()  # one parser for every engine: it reads flags, not weights
    previews = []
    for label, split, values in configs:
        engines = []
        for m in group.models:
            own = values.get(m.name, {})
            argv = m.argv(group.budget, split[m.name], own)
            check = checker.check(argv[len(m.setup.launch.launcher) :]) if checker is not None else None
            env = _env_shown(
                m.setup.launch, m.setup.engine.render(m.config(group.budget, split[m.name], own))
            )
            error = None if check is None or check.ok else check.error
            engines.append(EnginePreview(m.name, tuple(argv), env, error, check is not None))
        used = sum(group.budget.used(split[n]) for n in group.names)
        previews.append(
            GroupPreview(label, split, values, tuple(engines), group.infeasible(split, values), used)
        )
    return previews
