"""``autotune run``: baseline first, then Optuna's proposals; confirm the best; export it."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import typer

from autotune.cli._console import console, out
from autotune.cli._group import run_group
from autotune.cli._open import enqueue_prior, open_and_announce
from autotune.cli._render import FORMATS_ATTR, fmt_params, fmt_value, study_table, trial_line
from autotune.cli._study_options import study_command
from autotune.engine import startup_warnings, terminated
from autotune.errors import EXIT_NO_BASELINE
from autotune.study import (
    TrialHooks,
    TrialRecord,
    TrialReport,
    baseline_saturation,
    baseline_trial,
    baseline_what,
    best_feasible,
    choose_export,
    export_costs,
    run_study,
    saturation_summary,
)
from autotune.studyfile import StudySpec
from autotune.trial import VllmEvaluator
from autotune.tuning import (
    BaselinePlan,
    CommandPreview,
    GpuGroup,
    StudyLock,
    TrialScope,
    TuningSetup,
    build_setup,
    check_fingerprint,
    check_study_name,
    effective_fingerprint,
    forecast_summary,
    plan_baseline,
    plan_groups,
    run_parallel,
    space_change_note,
)

__all__ = ["run"]


@study_command("run", group=run_group)
def run(spec: StudySpec) -> None:
    """Tune vLLM on a workload: baseline (vLLM defaults) first, then Optuna's proposals; export the best.

    Exit codes: 0 done; 1 storage or other error; 2 bad input; 5 no baseline could be measured (the export
    says so); 6 the study is already running; 130 interrupted.
    """
    with build_setup(spec) as setup:
        for msg in setup.workload.skipped:
            console.print(f"[yellow]skipped[/yellow] {msg}")
        setup, groups = _plan_groups(setup)
        plan = plan_baseline(setup)
        setup = setup.with_prior()  # the prior's space: before the dry run shows samples of it
        if spec.dry_run:
            raise typer.Exit(_dry_run(setup, plan))
        name = check_study_name(spec.study or f"{Path(spec.workload or '').stem}-{setup.space.name}")
        setup.check_fixed_flags()
        # a second run of this study refuses; the confirmation's GPU lease (parallel runs) is released
        # cleanly at the end, so the next holder does not take this run for dead
        with StudyLock(spec.storage, name, spec.studies_dir), contextlib.ExitStack() as leases:
            st, sdir = open_and_announce(setup, name, spec.storage, spec.studies_dir, spec.seed, plan)
            if spec.predict:  # the latency model enqueues its own picks once the baseline is measured
                console.print(
                    "prior: its candidates are left to the latency model's picks (--predict)", style="dim"
                )
            else:
                enqueue_prior(setup, st)  # after the baseline (a night's picks follow its incumbent)
            for diff in check_fingerprint(st, setup, refuse=False):  # recorded for `autotune worker --study`
                console.print(f"this run differs from the study's: {diff}", style="yellow", markup=False)
            if note := space_change_note(st, setup):
                console.print(note, style="yellow", markup=False, soft_wrap=True)
            evaluator = _measure(st, setup, sdir, groups, leases)
            _report_and_export(st, setup, evaluator, sdir)
        if baseline_trial(st) is None:
            raise typer.Exit(EXIT_NO_BASELINE)


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
) -> VllmEvaluator:
    """The trials, in this process or in parallel workers; returns the evaluator that confirms the best."""
    spec = setup.choices
    todo = _trials_to_run(st, spec.n_trials, spec.total_trials)
    if groups is None:
        evaluator = setup.evaluator(sdir)
        if todo:
            _run_trials(st, setup, evaluator, todo, spec.timeout)
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
        say=lambda m: console.print(m, markup=False, soft_wrap=True),
        on_trial_done=lambda rep: say_trial(rep, setup.objective.metric),
    )
    leases.enter_context(parallel)
    return parallel.evaluator  # confirmation on worker 0's GPUs, leased by this process


def _report_and_export(st: optuna.Study, setup: TuningSetup, evaluator: VllmEvaluator, sdir: Path) -> None:
    spec = setup.choices
    console.print(study_table(st, setup.objective.metric))
    if baseline_trial(st) is None:
        console.print(
            "[red]no baseline was measured[/red]: the study cannot say what it gained over vLLM's "
            "defaults (look at the baseline trial's log)"
        )
        if best_feasible(st) is None:
            raise typer.Exit(EXIT_NO_BASELINE)  # nothing measured to export, not even a reference
    if spec.predict:
        _say_forecast(st, setup, sdir)
    target = spec.out or sdir / "best.yaml"
    _confirm_and_export(st, setup, evaluator, spec.confirm_rounds, spec.min_improvement, target)


def _say_forecast(st: optuna.Study, setup: TuningSetup, sdir: Path) -> None:
    """The latency model's ledger, vetoes and audits; its calibration saved for `autotune predict`."""
    for line in forecast_summary(st):
        console.print(line, markup=False, soft_wrap=True)
    forecast = setup.forecast()
    if forecast is None or forecast.refresh(st) is None:
        return
    cal = forecast.calibration(setup.engine_label, str(setup.space_path))
    if cal is not None:
        path = sdir / "calibration.json"
        cal.save(path)
        console.print(
            f"calibration: {path} (autotune predict --calibration {path})", markup=False, soft_wrap=True
        )


def say_trial(rep: TrialReport, metric: str) -> None:
    """A finished trial's line; after a saturated baseline, that every trial at this load will queue."""
    console.print(trial_line(rep, metric), soft_wrap=True)
    saturated = baseline_saturation(rep.record)
    if saturated is not None:
        console.print(saturated, style="bold red", markup=False, soft_wrap=True)


def _trials_to_run(st: optuna.Study, n_trials: int, total_trials: int | None) -> int:
    if total_trials is None:
        return n_trials
    finished = sum(t.state.is_finished() for t in st.get_trials(deepcopy=False))
    todo = max(total_trials - finished, 0)
    console.print(
        f"--total-trials {total_trials}: the study has {finished} finished trial(s), "
        + (f"running {todo} more" if todo else "nothing left to run")
    )
    return todo


def _run_trials(
    st: optuna.Study, setup: TuningSetup, evaluator: VllmEvaluator, n_trials: int, timeout: float | None
) -> None:
    formats = st.user_attrs.get(FORMATS_ATTR) or {}
    done = {"n": 0}

    def on_start(number: int, baseline: bool, params: Mapping[str, Any]) -> None:
        what = ("baseline: reference " if params else f"baseline: {baseline_what(st)} ") if baseline else ""
        console.print(
            f"[bold]trial {done['n'] + 1}/{n_trials}[/bold] (#{number}) starting: {what}"
            + (fmt_params(params, formats) if params or not baseline else "")
        )

    def on_done(rep: TrialReport) -> None:
        done["n"] += 1
        say_trial(rep, setup.objective.metric)
        if terminated():  # a SIGTERM whose unwinding was swallowed where it landed: stop here, as Ctrl-C
            raise KeyboardInterrupt

    policy = setup.policy(TrialScope(evaluator.log_dir))
    run_study(st, policy, evaluator, n_trials, TrialHooks(on_start=on_start, on_done=on_done), timeout)


def _confirm_and_export(
    st: optuna.Study,
    setup: TuningSetup,
    evaluator: VllmEvaluator,
    rounds: int,
    min_improvement: float,
    target: Path,
) -> None:
    """Choose the trial to export (a doubtful best passed over), re-measure it against the baseline,
    export it; say what was passed over, what got worse than the baseline, and how to deploy it."""
    from autotune.export import export_best, exporter_for

    metric = setup.objective.metric
    choice = choose_export(st, metric, floor=min_improvement)
    notes = choice.lines(metric)
    for line in notes:
        console.print(line, style="yellow", markup=False, soft_wrap=True)
    chosen, confirmed = _confirm(st, setup, evaluator, rounds, min_improvement, choice.trial)
    notes += confirmed
    if rounds < 1 and not choice.trusted and choice.trial is not None:
        notes.append(
            f"not re-measured (--confirm-rounds 0): trial {choice.trial.number} is exported on that figure alone"
        )
        console.print(notes[-1], style="yellow", markup=False, soft_wrap=True)
    costs = export_costs(st, chosen, metric) if chosen is not None else None
    checker = setup.checker()

    def check(argv: Any) -> str | None:
        return None if checker is None else checker.check(list(argv)).error

    fmt = setup.choices.export_format
    best, exported = export_best(
        st,
        out=target,
        trial=chosen,
        check=check,
        notes=[*notes, *([costs] if costs else [])],
        export_format=fmt,
    )
    out.print(f"best: trial {best.number} {metric} = {fmt_value(metric, best.value)}")
    if costs:
        out.print(costs, soft_wrap=True)
    out.print(f"wrote {target}" + ("" if fmt == "vllm-config" else f" ({fmt})"))
    out.print(f"deploy: {exporter_for(fmt).deploy_command(exported, target)}", soft_wrap=True)
    out.print(f"or:     {exported.command}", soft_wrap=True)
    saturated = saturation_summary(st)
    if saturated is not None:
        out.print(saturated, soft_wrap=True)


def _confirm(
    st: optuna.Study,
    setup: TuningSetup,
    evaluator: VllmEvaluator,
    rounds: int,
    min_improvement: float,
    candidate: optuna.trial.FrozenTrial | None,
) -> tuple[optuna.trial.FrozenTrial | None, list[str]]:
    """Re-measure ``candidate`` against the baseline: the trial to export, and the lines said (the
    verdict; runs that fell behind their schedule, whose figures are unreliable)."""
    from autotune.tuning import confirm_best

    progress = _ConfirmProgress(setup.objective.metric, rounds, setup.objective.is_capacity)
    chosen, confirmation = confirm_best(
        st,
        evaluator,
        setup.objective,
        rounds=rounds,
        min_improvement=min_improvement,
        log_dir=Path(evaluator.log_dir) / "confirm",
        on_run=progress,
        candidate=candidate,
    )
    lines: list[str] = []
    if confirmation is not None:
        lines.append(_verdict_line(confirmation))
        console.print(lines[-1], markup=False, soft_wrap=True)
    if progress.behind:
        lines.append(
            f"{len(progress.behind)} of {2 * rounds} confirmation runs fell behind their schedule, so their "
            f"figures are unreliable (first: {progress.behind[0]})"
        )
        console.print(lines[-1], style="yellow", markup=False, soft_wrap=True)
    return chosen, lines


@dataclass
class _ConfirmProgress:
    """Says each confirmation run as it ends (the confirmation takes minutes), and keeps the runs
    that fell behind their schedule."""

    metric: str
    rounds: int
    is_capacity: bool
    behind: list[str] = field(default_factory=list)

    def __call__(self, name: str, r: int, rec: TrialRecord) -> None:
        metric = self.metric
        value = rec.figures.get(metric) if rec.ok and rec.figures else None
        shown = (
            f"{metric} {fmt_value(metric, value)}"
            if value is not None
            else f"{rec.status.value} ({rec.failure})"
        )
        # a capacity run counts only levels whose load was delivered: its held level's lag is no doubt
        late = (
            str(rec.figures.raw.get("schedule_note") or "")
            if rec.ok and rec.figures and not self.is_capacity
            else ""
        )
        if late:
            self.behind.append(f"{name} round {r + 1}: {late}")
        console.print(
            f"confirming: round {r + 1}/{self.rounds} {name}: {shown}" + (f" ({late})" if late else ""),
            markup=False,
        )


def _verdict_line(confirmation: Mapping[str, Any]) -> str:
    verdict = (
        "confirmed"
        if confirmation["confirmed"]
        else "inconclusive: exporting the baseline"
        if confirmation.get("inconclusive")
        else "not confirmed: exporting the baseline"
    )
    return (
        f"re-measured trial {confirmation['trial']} against the baseline: {verdict} ({confirmation['why']})"
    )


def _dry_run(setup: TuningSetup, plan: BaselinePlan) -> int:
    from autotune.tuning import preview_commands

    spec = setup.choices
    out.print(f"# study fingerprint {effective_fingerprint(setup)} (the same study from a file or flags)")

    if setup.profile_note:
        out.print(f"# {setup.profile_note}")
    for warning in startup_warnings(setup.profile):
        out.print(f"# {warning}", soft_wrap=True)
    previews = preview_commands(setup, samples=spec.dry_run_samples, seed=spec.seed, reference=plan.reference)
    _say_space(setup)
    checked = setup.checker() is not None
    formats = {n: q.format for n, q in setup.space.parameters.items() if q.format}
    for p in previews:
        _say_preview(p, formats, checked, memory_checked=setup.guard is not None)
    out.print("\n# dry run: nothing was launched and no study was written (the port is chosen at launch)")
    return _dry_run_exit(setup, plan)


def _say_space(setup: TuningSetup) -> None:
    """What the dry run will tune: parameters the profile leaves out, the space, the prior, how a
    trial measures."""
    for pname, reason in setup.space.unsupported.items():
        out.print(f"# not tuned with profile {setup.profile.name}: {pname}: {reason}")
    for line in setup.space_lines():
        out.print(f"# {line}", markup=False, soft_wrap=True)
    prior = setup.prior
    for line in prior.lines if prior is not None else ():
        out.print(f"# {line}", soft_wrap=True)
    measure = setup.capacity.describe() if setup.capacity is not None else setup.pass_plan.describe()
    out.print(f"# {measure}; pruning {'on' if setup.choices.prune else 'off'}")


def _say_preview(
    p: CommandPreview, formats: Mapping[str, str], checked: bool, *, memory_checked: bool
) -> None:
    """One previewed command: its parameters, the parser's and the memory check's verdicts, the
    command line (and its KV transfer config)."""
    verdict = (
        f"REJECTED by vLLM's parser: {p.parser_error}"
        if p.parser_error
        else ("accepted by vLLM's parser" if checked else "not checked (--no-check-args)")
    )
    fit = "fits" if not p.fit_reasons else "does not fit: " + "; ".join(p.fit_reasons)
    out.print(f"\n# {p.label}: {fmt_params(p.params, formats)}")
    out.print(f"# {verdict}; memory: {fit if memory_checked else 'not checked'}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
    out.print((env + " " if env else "") + " ".join(shlex.quote(a) for a in p.argv), soft_wrap=True)
    if p.transfer_config is not None:
        out.print("# --kv-transfer-config:\n" + json.dumps(p.transfer_config, indent=2), soft_wrap=True)


def _dry_run_exit(setup: TuningSetup, plan: BaselinePlan) -> int:
    """0 when the study could run here (or the preview is for another host); else why not, and
    EXIT_NO_BASELINE unless a reference it may measure instead is accepted."""
    if plan.defaults_fit:
        return 0
    if (
        setup.profile_note
    ):  # a GPU profile previewed on a machine that cannot run it: the preview is the point
        console.print(
            f"this machine cannot run this study ({setup.profile_note}); the commands above are what a "
            f"{setup.profile.name} host would launch, checked against this machine's memory only",
            markup=False,
            soft_wrap=True,
        )
        return 0
    console.print(f"[yellow]vLLM's defaults cannot run here: {'; '.join(plan.why_not)}[/yellow]")
    console.print(f"the study would measure as its baseline: {plan.describe()}", markup=False, soft_wrap=True)
    if plan.reference is None:
        return EXIT_NO_BASELINE
    return 0 if setup.choices.accept_reference else EXIT_NO_BASELINE
