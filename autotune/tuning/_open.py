"""Open (or create) the study a setup measures into: storage, its folder and log, the profile and
value formats it records, stale shared-memory files, the trials a killed run left running, and the
baseline (or its reference)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.engine import CleanReport, clean_leftover_engines
from autotune.study import (
    PendingJournal,
    baseline_trial,
    ensure_baseline,
    fail_orphaned_trials,
    load_or_create,
    resolve_storage_url,
)
from autotune.tuning._reference import BaselinePlan
from autotune.tuning._setup import TuningSetup

__all__ = ["FORMATS_ATTR", "OpenedStudy", "open_study", "study_directory"]

FORMATS_ATTR = "param_formats"  # study attr: parameter -> its space's value format ("{}M")
ROLES_ATTR = "param_roles"  # study attr: role -> the space's parameter with it (the report reads it)


@dataclass(frozen=True)
class OpenedStudy:
    study: optuna.Study
    directory: Path  # trial logs, study.log, exports
    url: str  # may hold a password from $AUTOTUNE_STORAGE: show it with redact_url only
    finished_before: int  # trials finished by earlier runs (a resume when > 0)
    baseline_measured: bool
    previous_profile: str | None  # the profile an earlier run used, when it differs
    shm_cleaned: CleanReport | None
    recovered: int = 0  # measurements a storage fault had kept in the local journal, now added

    @property
    def journal(self) -> PendingJournal:
        return PendingJournal(self.directory)


def study_directory(studies_dir: Path, name: str) -> Path:
    return Path(studies_dir) / name


def open_study(
    setup: TuningSetup,
    name: str,
    storage: str | None,
    studies_dir: Path,
    seed: int | None,
    plan: BaselinePlan,
) -> OpenedStudy:
    url = resolve_storage_url(storage, name, studies_dir)  # a refused URL fails before anything is written
    sdir = study_directory(studies_dir, name)
    sdir.mkdir(parents=True, exist_ok=True)
    study = load_or_create(url, name, setup.objective, seed)
    previous = study.user_attrs.get("engine_profile")
    study.set_user_attr("engine_profile", setup.profile.name)
    study.set_user_attr(FORMATS_ATTR, {n: p.format for n, p in setup.space.parameters.items() if p.format})
    study.set_user_attr(ROLES_ATTR, setup.space.roles.as_dict())
    # What engines of a run killed together with its engine left (their runtime folders, the
    # /dev/shm files those engines made): only ours, never another program's unmapped file.
    cleaned = clean_leftover_engines()
    recovered = PendingJournal(sdir).replay(study)
    # A trial left RUNNING by a killed run fails now, not after the heartbeat's grace; a baseline
    # among them is enqueued once more (never a retry of it beside a waiting one).
    fail_orphaned_trials(study)
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    ensure_baseline(study, dict(plan.reference) if plan.reference is not None else None)
    return OpenedStudy(
        study=study,
        directory=sdir,
        url=url,
        finished_before=len(finished),
        baseline_measured=baseline_trial(study) is not None,
        previous_profile=previous if previous and previous != setup.profile.name else None,
        shm_cleaned=cleaned,
        recovered=recovered,
    )
