"""The baseline: the first trial of every study, vLLM's defaults plus the user's fixed flags (or a
named reference when the defaults cannot run here), so each study says what it gained. It is
enqueued whenever the study has no measured baseline (a baseline interrupted by Ctrl-C or a kill is
measured on resume), and only one is ever waiting. Re-running a study with the same name and
storage resumes it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.errors import StorageError
from autotune.space import EngineConfig, SearchSpace
from autotune.study._best import completed_trials
from autotune.study._objective import Objective
from autotune.study._record import BASELINE_ATTR, read_record
from autotune.study._storage import open_storage, redact_url

__all__ = [
    "REFERENCE_ATTR",
    "baseline_throughput",
    "baseline_trial",
    "baseline_what",
    "ensure_baseline",
    "load_or_create",
    "reference_config",
    "study_sampler",
]

REFERENCE_ATTR = "reference_params"  # study attr: the baseline's params when it is not the defaults


def baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The measured baseline, if it ran."""
    for t in completed_trials(study):
        rec = read_record(t)
        if rec.baseline and rec.ok:
            return t
    return None


def baseline_what(study: optuna.Study, reference: str | None = None) -> str:
    """What the baseline ran: ``reference X`` (the defaults do not fit), ``vLLM defaults with FLAGS``
    (the study's ``--baseline-arg`` values, e.g. the pool you run today) or ``vLLM defaults``."""
    if reference:
        return f"reference {reference}"
    spec = study.user_attrs.get("study_spec") or {}
    args = [str(a) for a in spec.get("baseline_args") or ()]
    return "vLLM defaults with " + " ".join(args) if args else "vLLM defaults"


def baseline_throughput(study: optuna.Study) -> float | None:
    base = baseline_trial(study)
    figures = read_record(base).figures if base else None
    return (figures.output_throughput or None) if figures else None


def reference_config(space: SearchSpace, reference: Mapping[str, Any] | None) -> EngineConfig:
    """The baseline's flags: none (vLLM's defaults), or the study's runnable reference."""
    return EngineConfig.chosen(space, dict(reference or {}))


def ensure_baseline(
    study: optuna.Study, reference: Mapping[str, Any] | None = None, *, running_counts: bool = False
) -> bool:
    """Enqueue the baseline unless the study has a measured one or one waiting (True: enqueued).

    ``reference``: the parameters of a runnable reference when vLLM's defaults cannot run here
    (stored on the study, so every worker and every later run measures the same one). Two workers
    racing here may both enqueue; the second baseline then reuses the first one's measurement.
    ``running_counts``: a baseline being measured counts as pending (a parallel worker's view; a
    lone run must not count one that a killed process left RUNNING).
    """
    if reference is not None:
        study.set_user_attr(REFERENCE_ATTR, dict(reference))
    # One read of the trials decides: a baseline read RUNNING by one query and COMPLETE by the next
    # (it finished in between) counts in neither, and was enqueued again (two PostgreSQL workers in
    # CI, with an evaluator that takes milliseconds).
    state = optuna.trial.TrialState
    for t in study.get_trials(deepcopy=False):
        if not t.user_attrs.get(BASELINE_ATTR):
            continue
        if t.state is state.WAITING or (running_counts and t.state is state.RUNNING):
            return False
        if t.state is state.COMPLETE and read_record(t).ok:
            return False
    study.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})
    return True


def study_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    """Every study's sampler, one engine or a group: TPE, 4 random trials first (a vLLM start is dear),
    then the parameters' joint distribution (multivariate)."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)


def load_or_create(storage_url: str, study_name: str, objective: Objective, seed: int | None) -> optuna.Study:
    storage = open_storage(storage_url)
    sampler = study_sampler(seed)
    try:
        try:  # the creator enqueues the baseline first, ahead of anything a caller enqueues
            study = optuna.create_study(
                storage=storage, study_name=study_name, direction=objective.direction, sampler=sampler
            )
            study.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
            _await_creators_baseline(study)
    except StorageError:
        raise
    except Exception as exc:  # sqlalchemy/optuna errors on a broken database
        raise StorageError(
            f"storage {redact_url(storage_url)}: cannot open study {study_name!r}: {_first_line(exc)}"
        ) from exc
    if study.direction.name.lower() != objective.direction:
        raise StorageError(
            f"study {study_name!r} is {study.direction.name.lower()}d, but --objective {objective.metric} is "
            f"{objective.direction}d (fix: pass the study's objective, or a new --study name)"
        )
    existing = study.user_attrs.get("objective")
    if existing and existing != objective.metric:
        raise StorageError(
            f"study {study_name!r} optimises {existing}, not {objective.metric} "
            "(fix: pass the same --objective, or a new --study name)"
        )
    study.set_user_attr("objective", objective.metric)
    return study


# How long a worker that found the study just created waits for its creator's baseline: the creator
# enqueues it right after creating (milliseconds); only a creator killed in between leaves none.
_CREATOR_GRACE_S = 5.0


def _await_creators_baseline(study: optuna.Study, grace_s: float = _CREATOR_GRACE_S) -> None:
    """Creating a study and enqueuing its baseline are two steps: a worker that loads the study in
    between and enqueued its own would give the study two baselines, measured at once (seen in CI
    with two PostgreSQL workers). While the study has no trial, wait for the creator's."""
    deadline = time.monotonic() + grace_s
    while not study.get_trials(deepcopy=False) and time.monotonic() < deadline:
        time.sleep(0.05)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
