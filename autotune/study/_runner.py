"""The study loop: Optuna proposes, the evaluator measures, constraints steer the sampler.

Trial 0 of every study is vLLM's defaults (no tuned flag rendered), so each study says how
much it gained over them. Re-running a study with the same name and storage resumes it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.errors import StorageError
from autotune.outcome import Evaluator, TrialStatus
from autotune.space import Parameter, RenderedConfig, SearchSpace, render_values
from autotune.study._objective import Objective
from autotune.study._storage import open_storage, redact_url

__all__ = ["BASELINE_ATTR", "StudyRun", "TrialReport", "run_study", "suggest_values"]

log = logging.getLogger(__name__)
BASELINE_ATTR = "baseline"


@dataclass(frozen=True)
class TrialReport:
    """What the CLI shows after each trial."""

    number: int
    baseline: bool
    params: Mapping[str, Any]
    record: Mapping[str, Any]  # the trial's stored record (status, figures, metrics, failure, ...)
    value: float | None
    feasible: bool
    best_number: int | None
    best_value: float | None


@dataclass(frozen=True)
class StudyRun:
    study_name: str
    storage_url: str  # redacted
    metric: str
    direction: str


def suggest_values(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Ask the trial for each tunable parameter whose condition holds (in declaration order)."""
    values: dict[str, Any] = {}
    for name, p in space.tunable.items():
        if p.condition is not None and not p.condition.holds(values.get(p.condition.param)):
            continue
        values[name] = _suggest(trial, name, p)
    return values


def _suggest(trial: optuna.Trial, name: str, p: Parameter) -> Any:
    if p.type == "bool":
        return trial.suggest_categorical(name, [True, False])
    if p.type == "categorical":
        assert p.choices is not None
        return trial.suggest_categorical(name, list(p.choices))
    assert p.low is not None and p.high is not None
    if p.type == "int":
        step = int(p.step) if p.step else 1
        return trial.suggest_int(name, int(p.low), int(p.high), step=step, log=p.log)
    return trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)


def _baseline_throughput(study: optuna.Study) -> float | None:
    base = baseline_trial(study)
    figures = (base.user_attrs.get("figures") or {}) if base else {}
    return float(figures.get("output_throughput", 0.0)) or None


def baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The measured baseline (vLLM's defaults), if it ran."""
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.user_attrs.get(BASELINE_ATTR) and t.user_attrs.get("status") == TrialStatus.OK.value:
            return t
    return None


def _measured_twin(
    study: optuna.Study, number: int, values: Mapping[str, Any]
) -> optuna.trial.FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.number != number and t.params == dict(values) and not t.user_attrs.get(BASELINE_ATTR):
            return t
    return None


def best_feasible(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    best: optuna.trial.FrozenTrial | None = None
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.value is None or not Objective.is_feasible(t.user_attrs.get("constraints", [1.0])):
            continue
        if best is None or sign * t.value < sign * (best.value or 0.0):
            best = t
    return best


def load_or_create(storage_url: str, study_name: str, objective: Objective, seed: int | None) -> optuna.Study:
    storage = open_storage(storage_url)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)
    try:
        try:  # the worker that creates the study enqueues the baseline: one baseline, however many workers
            study = optuna.create_study(
                storage=storage, study_name=study_name, direction=objective.direction, sampler=sampler
            )
            study.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
    except StorageError:
        raise
    except Exception as exc:  # sqlalchemy/optuna errors on a broken database
        raise StorageError(
            f"storage {redact_url(storage_url)}: cannot open study {study_name!r}: {exc}"
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


def run_study(
    *,
    study: optuna.Study,
    space: SearchSpace,
    evaluator: Evaluator,
    objective: Objective,
    n_trials: int,
    timeout_s: float | None = None,
    on_trial_start: Callable[[int, bool, Mapping[str, Any]], None] | None = None,
    on_trial_done: Callable[[TrialReport], None] | None = None,
    reuse_duplicates: bool = True,
) -> optuna.Study:
    """Run ``n_trials`` more trials (a new study's first trial is the baseline, enqueued at creation)."""

    def objective_fn(trial: optuna.Trial) -> float:
        is_baseline = bool(trial.user_attrs.get(BASELINE_ATTR))
        values = {} if is_baseline else suggest_values(trial, space)
        rendered = RenderedConfig(args=()) if is_baseline else render_values(space, values)
        log.info("trial %d %s", trial.number, "baseline (vLLM defaults)" if is_baseline else values)
        if on_trial_start is not None:
            on_trial_start(trial.number, is_baseline, values)
        twin = None if is_baseline or not reuse_duplicates else _measured_twin(study, trial.number, values)
        if twin is not None:  # samplers re-propose configs; a vLLM start is too dear to spend on a repeat
            log.info(
                "trial %d: same configuration as trial %d, its measurement is reused",
                trial.number,
                twin.number,
            )
            for key, val in twin.user_attrs.items():
                if key != BASELINE_ATTR:
                    trial.set_user_attr(key, val)
            trial.set_user_attr("duplicate_of", twin.number)
            for cname, cvalue in twin.constraints.items():
                trial.set_constraint(cname, cvalue)
            assert twin.value is not None
            return twin.value
        outcome = evaluator(trial.number, rendered)
        record = outcome.record()
        for key, val in record.items():
            trial.set_user_attr(key, val)
        trial.set_user_attr("rendered_args", list(rendered.args))
        trial.set_user_attr("rendered_env", dict(rendered.env))
        baseline_tput = None if is_baseline else _baseline_throughput(study)
        feasible = outcome.status == TrialStatus.OK
        constraints = objective.constraints(
            record["figures"], baseline_tput, feasible=feasible, memory_violations=len(outcome.violations)
        )
        trial.set_user_attr("constraints", constraints)
        trial.set_user_attr("constraint_names", objective.constraint_names())
        for cname, cvalue in zip(objective.constraint_names(), constraints, strict=True):
            trial.set_constraint(cname, cvalue)  # the sampler learns the infeasible region from these
        value = objective.penalty()
        if outcome.figures is not None:
            measured = outcome.figures.metric(objective.metric)
            if not math.isnan(measured):
                value = measured
        return value

    def callback(st: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        if on_trial_done is None:
            return
        best = best_feasible(st)
        cons = frozen.user_attrs.get("constraints", [1.0])
        outcome_status = frozen.user_attrs.get("status")
        on_trial_done(
            TrialReport(
                number=frozen.number,
                baseline=bool(frozen.user_attrs.get(BASELINE_ATTR)),
                params=frozen.params,
                record=dict(frozen.user_attrs),
                value=frozen.value if outcome_status == TrialStatus.OK.value else None,
                feasible=Objective.is_feasible(cons),
                best_number=best.number if best else None,
                best_value=best.value if best else None,
            )
        )

    study.optimize(objective_fn, n_trials=n_trials, timeout=timeout_s, callbacks=[callback])
    return study


__all__ += ["baseline_trial", "best_feasible", "load_or_create"]
