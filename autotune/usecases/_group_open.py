"""What a group's run and night share: its study opened (or resumed), the prior's split announced,
and the header that names the group's models, budget and spaces."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import optuna

from autotune.study import resolve_storage_url, study_sampler
from autotune.studyfile import StudySpec
from autotune.tuning import GroupSetup, prior_split, study_directory
from autotune.usecases._reporter import Reporter

__all__ = ["announce_prior", "group_header", "open_group_study"]


def open_group_study(common: StudySpec, name: str) -> tuple[optuna.Study, Path, str]:
    """The group study ``name`` (created, or loaded to resume), its folder and its storage URL."""
    url = resolve_storage_url(common.storage, name, common.studies_dir)
    sdir = study_directory(common.studies_dir, name)
    sdir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=name,
        storage=url,
        direction="minimize",
        sampler=study_sampler(common.seed),  # the single engine's: one sampler for every study
        load_if_exists=True,
    )
    return study, sdir, url


def announce_prior(setup: GroupSetup, use_prior: bool, reporter: Reporter) -> Mapping[str, float] | None:
    """The prior's split to try first (its reasons printed), or None with --no-prior."""
    if not use_prior:
        return None
    prior = prior_split(setup)
    for line in prior.lines:
        reporter.show(f"# {line}", markup=False, soft_wrap=True)
    return prior.split


def group_header(setup: GroupSetup, reporter: Reporter) -> None:
    """The group's models, budget, notes and spaces, as ``# `` lines."""
    names = ", ".join(setup.names)
    reporter.show(
        f"# a group of {len(setup.models)} models on one server ({names}); {setup.budget.total_text()}"
    )
    if setup.host_pool_gib is not None:
        reporter.show(f"# KV-offload pools: {setup.host_pool_gib:g} GiB of host memory for the group in all")
    for note in setup.notes:
        reporter.show(f"# {note}", markup=False, soft_wrap=True)
    for m in setup.models:
        s = m.setup
        reporter.show(
            f"# {m.name}: model {s.model}, workload {s.choices.workload} ({len(s.workload)} requests, "
            f"{s.arrival.describe()}), space {s.space_path}, weight {m.weight:g}",
            soft_wrap=True,
        )
        for line in s.space_lines():
            reporter.show(f"# {m.name}: {line}", markup=False, soft_wrap=True)
