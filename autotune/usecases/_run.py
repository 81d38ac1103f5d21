"""The ``run`` use case: baseline first, then Optuna's proposals; confirm the best; export it."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import terminated
from autotune.errors import EXIT_NO_BASELINE
from autotune.study import (
    TrialHooks,
    TrialReport,
    baseline_saturation,
    baseline_trial,
    baseline_what,
    run_study,
)
from autotune.studyfile import StudySpec
from autotune.trial import VllmEvaluator
from autotune.tuning import (
    GpuGroup,
    StudyLock,
    TrialScope,
    TuningSetup,
    build_setup,
    check_fingerprint,
    check_study_name,
    plan_baseline,
    plan_groups,
    run_parallel,
    space_change_note,
)
from autotune.usecases._dry_run import dry_run
from autotune.usecases._open import enqueue_prior, open_and_announce
from autotune.usecases._render import FORMATS_ATTR, fmt_params, trial_line
from autotune.usecases._reporter import Reporter
from autotune.usecases._run_export import report_and_export

__all__ = ["RunOutcome", "run"]


@dataclass(frozen=True)
class RunOutcome:
    """How a ``run`` ended: its exit code (0, or ``EXIT_NO_BASELINE``: no baseline measured, or a dry
    run that could not measure one), the study's name and the file exported (None for a dry run, or
    when nothing was measured to export)."""

    exit_code: int
    study: str | None = None
    export: Path | None = None


def run(spec: StudySpec, reporter: Reporter) -> RunOutcome:
    """Tune vLLM on a workload: baseline (vLLM defaults) first, then Optuna's proposals; export the best
    (``--dry-run``: the commands it would launch, nothing launched)."""
    with build_setup(spec) as setup:
        for msg in setup.workload.skipped:
            reporter.say(f"[yellow]skipped[/yellow] {msg}")
        setup, groups = _plan_groups(setup)
        plan = plan_baseline(setup)
        setup = setup.with_prior()  # the prior's space: before the dry run shows samples of it
        if spec.dry_run:
            return RunOutcome(dry_run(setup, plan, reporter))
        name = check_study_name(spec.study or f"{Path(spec.workload or '').stem}-{setup.space.name}")
        setup.check_fixed_flags()
        # a second run of this study refuses; the confirmation's GPU lease (parallel runs) is released
        # cleanly at the end, so the next holder does not take this run for dead
        with StudyLock(spec.storage, name, spec.studies_dir), contextlib.ExitStack() as leases:
            st, sdir = open_and_announce(
                setup, name, spec.storage, spec.studies_dir, spec.seed, plan, reporter
            )
            _before_trials(st, setup, reporter)
            evaluator = _measure(st, setup, sdir, groups, leases, reporter)
            exported = report_and_export(st, setup, evaluator, sdir, reporter)
            if exported is None:  # nothing measured to export, not even a reference
                return RunOutcome(EXIT_NO_BASELINE, name)
        return RunOutcome(EXIT_NO_BASELINE if baseline_trial(st) is None else 0, name, exported)


def _before_trials(st: optuna.Study, setup: TuningSetup, reporter: Reporter) -> None:
    """The prior's candidates (or the latency model's, later), and how this run differs from the study's."""
    if setup.choices.predict:  # the latency model enqueues its own picks once the baseline is measured
        reporter.say("prior: its candidates are left to the latency model's picks (--predict)", style="dim")
    else:
        enqueue_prior(setup, st, reporter)  # after the baseline (a night's picks follow its incumbent)
    for diff in check_fingerprint(st, setup, refuse=False):  # recorded for `autotune worker --study`
        reporter.say(f"this run differs from the study's: {diff}", style="yellow", markup=False)
    if note := space_change_note(st, setup):
        reporter.say(note, style="yellow", markup=False, soft_wrap=True)


def _plan_groups(setup: TuningSetup) -> tuple[TuningSetup, tuple[GpuGroup, ...] | None]:
    """Parallel workers (--gpus, --workers), and the setup whose baseline plan and prior read worker
    0's GPUs (not GPU 0 while another job fills it)."""
    spec = setup.choices
    if not (spec.gpus or spec.workers) or spec.dry_run:
        return setup, None
    groups = plan_groups(setup, spec.gpus, workers=spec.workers)
    if groups and groups[0].gpus:
        setup = setup.watching_gpus(groups[0].gpus)
    return setup, groups


def _measure(
    st: optuna.Study,
    setup: TuningSetup,
    sdir: Path,
    groups: tuple[GpuGroup, ...] | None,
    leases: contextlib.ExitStack,
    reporter: Reporter,
) -> VllmEvaluator:
    """The trials, in this process or in parallel workers; returns the evaluator that confirms the best."""
    spec = setup.choices
    todo = _trials_to_run(st, spec.n_trials, spec.total_trials, reporter)
    if groups is None:
        evaluator = setup.evaluator(sdir)
        if todo:
            _run_trials(st, setup, evaluator, todo, reporter)
        return evaluator
    parallel = run_parallel(
        setup,
        st,
        sdir,
        groups,
        storage=spec.storage,
        studies_dir=spec.studies_dir,
        n_trials=todo,
        timeout_s=spec.timeout,
        seed=spec.seed,
        say=lambda m: reporter.say(m, markup=False, soft_wrap=True),
        on_trial_done=lambda rep: say_trial(rep, setup.objective.metric, reporter),
    )
    leases.enter_context(parallel)
    return parallel.evaluator  # confirmation on worker 0's GPUs, leased by this process


def say_trial(rep: TrialReport, metric: str, reporter: Reporter) -> None:
    """A finished trial's line; after a saturated baseline, that every trial at this load will queue."""
    reporter.say(trial_line(rep, metric), soft_wrap=True)
    saturated = baseline_saturation(rep.record)
    if saturated is not None:
        reporter.say(saturated, style="bold red", markup=False, soft_wrap=True)


def _trials_to_run(st: optuna.Study, n_trials: int, total_trials: int | None, reporter: Reporter) -> int:
    if total_trials is None:
        return n_trials
    finished = sum(t.state.is_finished() for t in st.get_trials(deepcopy=False))
    todo = max(total_trials - finished, 0)
    reporter.say(
        f"--total-trials {total_trials}: the study has {finished} finished trial(s), "
        + (f"running {todo} more" if todo else "nothing left to run")
    )
    return todo


def _run_trials(
    st: optuna.Study, setup: TuningSetup, evaluator: VllmEvaluator, n_trials: int, reporter: Reporter
) -> None:
    formats = st.user_attrs.get(FORMATS_ATTR) or {}
    done = {"n": 0}

    def on_start(number: int, baseline: bool, params: Mapping[str, Any]) -> None:
        what = ("baseline: reference " if params else f"baseline: {baseline_what(st)} ") if baseline else ""
        reporter.say(
            f"[bold]trial {done['n'] + 1}/{n_trials}[/bold] (#{number}) starting: {what}"
            + (fmt_params(params, formats) if params or not baseline else "")
        )

    def on_done(rep: TrialReport) -> None:
        done["n"] += 1
        say_trial(rep, setup.objective.metric, reporter)
        if terminated():  # a SIGTERM whose unwinding was swallowed where it landed: stop here, as Ctrl-C
            raise KeyboardInterrupt

    policy = setup.policy(TrialScope(evaluator.log_dir))
    hooks = TrialHooks(on_start=on_start, on_done=on_done)
    run_study(st, policy, evaluator, n_trials, hooks, setup.choices.timeout)
