"""The study loop: Optuna proposes, the evaluator measures, constraints steer the sampler.

The first trial of every study is the baseline: vLLM's defaults plus the user's fixed flags (or
a named reference when the defaults cannot run here), so each study says what it gained. It is
enqueued whenever the study has no measured baseline, so a baseline interrupted by Ctrl-C is
measured on resume. Re-running a study with the same name and storage resumes it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.errors import StorageError
from autotune.space import Parameter, RenderedConfig, SearchSpace, describe_values, render_values
from autotune.study._best import best_feasible, completed_trials
from autotune.study._journal import PendingJournal, storage_fault
from autotune.study._objective import Objective
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import (
    BASELINE_ATTR,
    Evaluator,
    Figures,
    TrialRecord,
    TrialStatus,
    constraints_hold,
    read_record,
    write_record,
)
from autotune.study._reuse import measured_twin, pruned_twin, refused_by, reuse_measurement, reuse_pruned
from autotune.study._storage import open_storage, redact_url

__all__ = [
    "TrialReport",
    "baseline_trial",
    "best_feasible",
    "ensure_baseline",
    "failure_summary",
    "load_or_create",
    "render_reference",
    "run_study",
    "suggest_values",
]

log = logging.getLogger(__name__)
REFERENCE_ATTR = "reference_params"  # study attr: the baseline's params when it is not the defaults


@dataclass(frozen=True)
class TrialReport:
    """What the CLI shows after each trial."""

    number: int
    params: Mapping[str, Any]
    record: TrialRecord
    value: float | None
    feasible: bool
    best_number: int | None
    best_value: float | None


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


def baseline_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The measured baseline, if it ran."""
    for t in completed_trials(study):
        rec = read_record(t)
        if rec.baseline and rec.ok:
            return t
    return None


def _baseline_throughput(study: optuna.Study) -> float | None:
    base = baseline_trial(study)
    figures = read_record(base).figures if base else None
    return (figures.output_throughput or None) if figures else None


def render_reference(space: SearchSpace, reference: Mapping[str, Any] | None) -> RenderedConfig:
    """The baseline's flags: none (vLLM's defaults), or the study's runnable reference."""
    return render_values(space, dict(reference)) if reference else RenderedConfig(args=())


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


def load_or_create(storage_url: str, study_name: str, objective: Objective, seed: int | None) -> optuna.Study:
    storage = open_storage(storage_url)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, multivariate=True)
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


def run_study(
    *,
    study: optuna.Study,
    space: SearchSpace,
    evaluator: Evaluator,
    objective: Objective,
    n_trials: int | None,
    timeout_s: float | None = None,
    on_trial_start: Callable[[int, bool, Mapping[str, Any]], None] | None = None,
    on_trial_done: Callable[[TrialReport], None] | None = None,
    reuse_duplicates: bool = True,
    trial_attrs: Mapping[str, Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
    journal: PendingJournal | None = None,
    pruner: IncumbentPruner | None = None,
    predict: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    veto: Callable[[optuna.Study, Mapping[str, Any]], str | None] | None = None,
    before_replay: Callable[[], None] | None = None,
    baseline_elsewhere: bool = False,
) -> optuna.Study:
    """Run ``n_trials`` more trials (None: until ``timeout_s`` or ``should_stop``); a study without a
    measured baseline measures it first. ``trial_attrs`` are stored on every trial run now (the
    nightly command tags its night); ``should_stop`` is asked after each trial.

    ``pruner``: stops a trial early when its running objective is worse than the incumbent's
    beyond the noise (never the baseline); the trial is recorded ``pruned`` with its partial
    figures. ``predict``: what the workload-aware prior expects of a configuration, stored next
    to what was measured. ``veto``: why a configuration is not worth launching (None: launch it).
    ``before_replay``: called (it may block) once a trial's engine is up, before it replays; not
    for the baseline (parallel workers hold their replays until the baseline is measured).
    ``baseline_elsewhere``: another live worker may be measuring the baseline right now."""
    ensure_baseline(study, running_counts=baseline_elsewhere)
    if pruner is not None:
        study.pruner = pruner

    def _progress(trial: optuna.Trial, is_baseline: bool) -> Callable[[int, Mapping[str, Any]], str | None]:
        def report(step: int, partial: Mapping[str, Any]) -> str | None:
            if step == 0:  # the engine is up, the replay not started
                if before_replay is not None and not is_baseline:
                    before_replay()
                return None
            value = Figures(dict(partial)).get(objective.metric)
            if value is None:
                return None
            trial.report(value, step)
            if is_baseline or pruner is None or not trial.should_prune():
                return None
            return pruner.last_reason or "pruned"

        return report

    def objective_fn(trial: optuna.Trial) -> float:
        for key, val in (trial_attrs or {}).items():
            trial.set_user_attr(key, val)
        is_baseline = bool(trial.user_attrs.get(BASELINE_ATTR))
        reference = study.user_attrs.get(REFERENCE_ATTR) if is_baseline else None
        values = dict(reference or {}) if is_baseline else suggest_values(trial, space)
        rendered = render_values(space, values) if values else RenderedConfig(args=())
        label = "baseline" + (f" (reference {values})" if values else " (vLLM defaults)")
        log.info("trial %d %s", trial.number, label if is_baseline else values)
        if on_trial_start is not None:
            on_trial_start(trial.number, is_baseline, values)
        measured_base = baseline_trial(study) if is_baseline else None
        twin = (
            measured_base
            if measured_base is not None
            else (None if is_baseline or not reuse_duplicates else measured_twin(study, trial.number, values))
        )
        if twin is not None:  # samplers re-propose configs; a vLLM start is too dear to spend on a repeat
            log.info(
                "trial %d: same configuration as trial %d, its measurement is reused",
                trial.number,
                twin.number,
            )
            return reuse_measurement(trial, twin, is_baseline)
        stopped = None if is_baseline or not reuse_duplicates else pruned_twin(study, trial.number, values)
        if stopped is not None:
            log.info("trial %d: same configuration as trial %d, which was pruned: not launched", trial.number,
                     stopped.number)  # fmt: skip
            reuse_pruned(trial, stopped)
        refused = None if is_baseline else refused_by(study, values)
        if refused is not None:
            log.info(
                "trial %d: %s was refused by the engine in trial %d: not launched",
                trial.number,
                refused[1],
                refused[0],
            )
            record = TrialRecord(
                status=TrialStatus.INFEASIBLE,
                failure="bad_flag",
                reason=f"{refused[1]} was refused by the engine in trial {refused[0]}: not launched again",
            )
        else:
            vetoed = None if is_baseline or veto is None else veto(study, values)
            if vetoed is not None:
                log.info("trial %d: not launched: %s", trial.number, vetoed)
                record = TrialRecord(status=TrialStatus.INFEASIBLE, failure="prior", reason=vetoed)
            else:
                record = evaluator(trial.number, rendered, _progress(trial, is_baseline))
        if predict is not None:
            record = record.with_(predicted=dict(predict(values)))
        if record.status is TrialStatus.PRUNED:
            log.info("trial %d pruned: %s", trial.number, record.reason)
            write_record(
                trial, record.with_(rendered_args=tuple(rendered.args), rendered_env=dict(rendered.env))
            )
            raise optuna.TrialPruned(record.reason)
        baseline_tput = None if is_baseline else _baseline_throughput(study)
        constraints = objective.constraints(
            record.figures.as_dict() if record.figures else None,
            baseline_tput,
            feasible=record.ok,
            memory_violations=len(record.violations),
        )
        names = objective.constraint_names()
        record = record.with_(
            rendered_args=tuple(rendered.args),
            rendered_env=dict(rendered.env),
            baseline=is_baseline,
            reference=describe_values(space, values) if is_baseline and values else None,
            constraints=tuple(constraints),
            constraint_names=tuple(names),
        )
        value = objective.penalty()
        if record.figures is not None:
            measured = record.figures.get(objective.metric)
            if measured is not None and not math.isnan(measured):
                value = measured
        if journal is not None:  # kept locally until the storage has it (a full disk loses nothing)
            attrs = {**trial.user_attrs, **record.to_attrs()}
            journal.save(trial, value, attrs, dict(zip(names, constraints, strict=True)))
        write_record(trial, record)
        for cname, cvalue in zip(names, constraints, strict=True):
            trial.set_constraint(cname, cvalue)  # the sampler learns the infeasible region from these
        return value

    def callback(st: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        if journal is not None:
            journal.discard(frozen.number)  # the storage holds it now
        if should_stop is not None and should_stop():
            st.stop()
        if on_trial_done is None:
            return
        best = best_feasible(st)
        rec = read_record(frozen)
        on_trial_done(
            TrialReport(
                number=frozen.number,
                params=frozen.params,
                record=rec,
                value=frozen.value if rec.status is TrialStatus.OK else None,
                feasible=rec.ok and constraints_hold(rec.constraints or (1.0,)),
                best_number=best.number if best else None,
                best_value=best.value if best else None,
            )
        )

    try:
        study.optimize(objective_fn, n_trials=n_trials, timeout=timeout_s, callbacks=[callback])
    except Exception as exc:
        cause = storage_fault(exc)
        if cause is None:
            raise
        kept = (
            f"; the measurement is kept in {journal.directory} and added on the next run" if journal else ""
        )
        raise StorageError(f"the study storage failed while recording a trial: {cause}{kept}") from exc
    return study


def failure_summary(study: optuna.Study) -> str | None:
    """Why the study has no feasible trial, from the dominant reason, with the fix that reason needs
    (None when a trial is feasible)."""
    if best_feasible(study) is not None:
        return None
    classes: dict[str, int] = {}
    requests: dict[str, int] = {}
    trials = [read_record(t) for t in completed_trials(study) if t.user_attrs.get("status")]
    for rec in trials:
        if rec.ok and rec.figures is not None and rec.figures.failed:
            classes["failed_requests"] = classes.get("failed_requests", 0) + 1
            for why, n in rec.figures.failures.items():
                requests[why] = requests.get(why, 0) + n
        elif not rec.ok:
            key = rec.failure or "failed"
            classes[key] = classes.get(key, 0) + 1
            if rec.failure == "no_success" and rec.figures is not None:
                for why, n in rec.figures.failures.items():
                    requests[why] = requests.get(why, 0) + n
        else:
            classes["constraints"] = classes.get("constraints", 0) + 1
    if not classes:
        return "no trial finished"
    top, count = max(classes.items(), key=lambda kv: kv[1])
    fixes = {
        "failed_requests": "the server refused requests of the workload, whatever the configuration (fix: the "
        "workload or --max-model-len, not the search space)",
        "no_success": "no request succeeded (fix: the workload, the API key or --max-model-len, not the search space)",
        "does_not_fit": "configurations do not fit this machine's memory (fix: smaller KV or offload settings, a "
        "lower --max-model-len, or --host-share)",
        "bad_flag": "the engine refused the flags (fix: the fixed --engine-arg flags or the space's values)",
        "out_of_memory": "the engine ran out of memory at start (fix: a lower gpu-memory-utilization or KV size)",
        "constraints": "trials ran but missed a constraint (fix: relax --slo / --min-throughput-ratio or widen the space)",
    }
    line = f"{count} of {len(trials)} trials: {fixes.get(top, top + ' (fix: look at the trial logs)')}"
    if requests and top in ("failed_requests", "no_success"):
        reason, n = max(requests.items(), key=lambda kv: kv[1])
        line += f"; most failed requests ({n}): {reason}"
    return line
