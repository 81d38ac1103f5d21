"""``autotune run``: baseline first, then Optuna's proposals; confirm the best; export it."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import optuna
import typer

from autotune.cli import _options as o
from autotune.cli._console import console, log_to_file, out
from autotune.cli._render import FORMATS_ATTR, fmt_params, fmt_value, study_table, trial_line
from autotune.errors import EXIT_NO_BASELINE
from autotune.study import PendingJournal, TrialReport, baseline_trial, best_feasible, redact_url, run_study
from autotune.tuning import (
    BaselinePlan,
    StudyLock,
    TuningSetup,
    build_setup,
    check_fingerprint,
    check_study_name,
    open_study,
    plan_baseline,
    plan_groups,
    run_parallel,
)

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["run"]


def run(
    workload: o.Workload,
    model: o.Model,
    profile: o.Profile = None,
    space: o.Space = None,
    study: Annotated[
        Optional[str],
        typer.Option(help="Study name; re-running with the same name resumes. Default: WORKLOAD-SPACE."),
    ] = None,
    storage: o.Storage = None,
    studies_dir: o.StudiesDir = Path("studies"),
    n_trials: Annotated[
        int,
        typer.Option(min=1, help="Trials to run now, the baseline included: this many MORE when resuming."),
    ] = 10,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            help="Run trials in parallel on this host's GPUs: 0,1,2,3 or all; one worker per GPU, or per group "
            "of --tensor-parallel-size GPUs. Each engine sees only its GPUs."
        ),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(
            min=1, help="Without GPUs (the CPU build): this many parallel workers, each on its own CPU cores."
        ),
    ] = None,
    total_trials: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="Instead of --n-trials: run until the study has this many finished trials in all "
            "(re-running the same command after an interruption then finishes the job, no more).",
        ),
    ] = None,
    timeout: Annotated[
        Optional[float], typer.Option(help="Stop starting new trials after this many seconds.")
    ] = None,
    objective: o.ObjectiveMetric = "ttft_p90",
    slo: o.Slo = None,
    min_throughput_ratio: o.MinThroughputRatio = 0.95,
    out_path: Annotated[
        Optional[Path], typer.Option("--out", help="Best-config YAML. Default: STUDIES_DIR/STUDY/best.yaml.")
    ] = None,
    engine_arg: o.EngineArg = None,
    launcher: o.Launcher = None,
    startup_timeout: o.StartupTimeout = 600.0,
    rate: o.Rate = None,
    burstiness: o.Burstiness = None,
    concurrency: o.Concurrency = None,
    speed: o.Speed = 1.0,
    sample: o.Sample = None,
    seed: o.Seed = 0,
    warmup: o.Warmup = 2,
    history: o.History = "recorded",
    api_key_env: o.ApiKeyEnv = None,
    host_share: o.HostShare = 0.65,
    allow_swap: o.AllowSwap = False,
    check_memory: o.CheckMemory = True,
    confirm_rounds: Annotated[
        int,
        typer.Option(
            min=0,
            help="Before exporting, re-measure baseline and best alternately this many times each; the best "
            "is exported only if it wins by more than the noise (0: skip).",
        ),
    ] = 2,
    min_improvement: Annotated[
        float, typer.Option(help="Smallest relative gain of the median that confirmation accepts.")
    ] = 0.03,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Print the exact commands (baseline and a few sampled trials) with their environment, "
            "checked by vLLM's parser and the memory estimate; launch nothing, write nothing."
        ),
    ] = False,
    dry_run_samples: Annotated[int, typer.Option(min=0, help="Sampled trials shown by --dry-run.")] = 3,
    accept_reference: Annotated[
        bool,
        typer.Option(
            help="With --dry-run: exit 0 even when vLLM's defaults cannot run here (a runnable reference "
            "is then measured as the baseline)."
        ),
    ] = False,
    check_args: o.CheckArgs = True,
    skip_bad_lines: o.SkipBadLines = False,
    passes: o.Passes = "auto",
    compile_cache: o.CompileCache = None,
    prune: o.Prune = True,
    prior: o.Prior = True,
) -> None:
    """Tune vLLM on a workload: baseline (vLLM defaults) first, then Optuna's proposals; export the best.

    Exit codes: 0 done; 2 bad input; 5 no baseline could be measured (the export says so); 130 interrupted.
    """
    from autotune.cli._options import tuning_choices

    choices = tuning_choices(
        workload=workload, model=model, profile=profile, space=space, engine_arg=engine_arg,
        launcher=launcher, startup_timeout=startup_timeout, rate=rate, burstiness=burstiness,
        concurrency=concurrency, speed=speed, sample=sample, seed=seed, warmup=warmup, history=history,
        api_key_env=api_key_env, host_share=host_share, allow_swap=allow_swap, check_memory=check_memory,
        check_args=check_args, skip_bad_lines=skip_bad_lines, objective=objective, slo=slo,
        min_throughput_ratio=min_throughput_ratio, preview=dry_run,
        passes=passes, prune=prune, prior=prior, compile_cache=compile_cache,
    )  # fmt: skip
    with build_setup(choices) as setup:
        for msg in setup.workload.skipped:
            console.print(f"[yellow]skipped[/yellow] {msg}")
        groups = plan_groups(setup, gpus, workers=workers) if (gpus or workers) and not dry_run else None
        if groups and groups[0].gpus:  # the baseline plan and the prior read the GPUs that measure them
            setup.watch_gpus(groups[0].gpus)  # (worker 0's), not GPU 0 when another job fills it
        plan = plan_baseline(setup)
        setup.apply_prior()  # may shrink the space: before the dry run shows samples of it
        if dry_run:
            raise typer.Exit(_dry_run(setup, plan, dry_run_samples, seed, accept_reference))
        name = check_study_name(study or f"{workload.stem}-{setup.space.name}")
        setup.check_fixed_flags()
        # a second run of this study on this host refuses; the confirmation's GPU lease (parallel
        # runs) is released cleanly at the end, so the next holder does not take this run for dead
        with StudyLock(studies_dir, name), contextlib.ExitStack() as leases:
            st, sdir = open_and_announce(setup, name, storage, studies_dir, seed, plan)
            for diff in check_fingerprint(st, setup, refuse=False):  # recorded for `autotune worker --study`
                console.print(
                    "this run differs from the study's: " + diff, style="yellow", markup=False, soft_wrap=True
                )
            todo = _trials_to_run(st, n_trials, total_trials)
            if groups is None:
                evaluator = setup.evaluator(sdir)
                if todo:
                    _run_trials(st, setup, evaluator, todo, timeout)
            else:
                parallel = run_parallel(
                    setup,
                    st,
                    sdir,
                    groups,
                    storage=storage,
                    studies_dir=studies_dir,
                    n_trials=todo,
                    timeout_s=timeout,
                    seed=seed,
                    say=lambda m: console.print(m, markup=False, soft_wrap=True),
                    on_trial_done=lambda rep: console.print(
                        trial_line(rep, setup.objective.metric), soft_wrap=True
                    ),
                )
                leases.enter_context(parallel)
                evaluator = parallel.evaluator  # confirmation on worker 0's GPUs, leased by this process
            console.print(study_table(st, setup.objective.metric))
            if baseline_trial(st) is None:
                console.print(
                    "[red]no baseline was measured[/red]: the study cannot say what it gained over vLLM's "
                    "defaults (look at the baseline trial's log)"
                )
            target = out_path or sdir / "best.yaml"
            if baseline_trial(st) is None and best_feasible(st) is None:
                raise typer.Exit(EXIT_NO_BASELINE)  # nothing measured to export, not even a reference
            _confirm_and_export(st, setup, evaluator, confirm_rounds, min_improvement, target)
        if baseline_trial(st) is None:
            raise typer.Exit(EXIT_NO_BASELINE)


def open_and_announce(
    setup: TuningSetup, name: str, storage: str | None, studies_dir: Path, seed: int, plan: BaselinePlan
) -> tuple[optuna.Study, Path]:
    """Open the study (see :func:`autotune.tuning.open_study`) and say what this run starts from."""
    import logging

    opened = open_study(setup, name, storage, studies_dir, seed, plan)
    log_to_file(opened.directory / "study.log")
    st = opened.study
    if opened.previous_profile:
        console.print(
            f"[yellow]study {name} ran with profile {opened.previous_profile}; this run uses {setup.profile.name}[/yellow]"
        )
    for pname, reason in setup.space.unsupported.items():
        console.print(f"[dim]not tuned with profile {setup.profile.name}: {pname}: {reason}[/dim]")
    if setup.profile.name == "cuda-lmcache" and setup.profile.unavailable is None:
        from autotune.engine import lmcache_ops

        ops = lmcache_ops()  # a slow fallback would be tuned and deployed without a word
        logging.getLogger("autotune.engine").info("LMCache's compiled ops: %s", ops.line)
        if ops.warning():
            console.print(f"[yellow]{ops.warning()}[/yellow]", soft_wrap=True)
    if (isa := _isa_warning(setup)) is not None:
        console.print(f"[yellow]{isa}[/yellow]", soft_wrap=True)
    if opened.recovered:
        console.print(f"recovered {opened.recovered} measured trial(s) that a storage fault had kept locally")
    if opened.shm_cleaned is not None and opened.shm_cleaned.removed:
        console.print(opened.shm_cleaned.summary())
    console.print(
        f"study [bold]{name}[/bold] in {redact_url(opened.url)} | {setup.engine_label} | space {setup.space_path} | "
        f"workload {setup.choices.workload} ({len(setup.workload)} requests, {setup.arrival.describe()}) | "
        f"objective {setup.objective.direction} {setup.objective.metric}"
    )
    if opened.finished_before:
        base = baseline_trial(st)
        console.print(
            f"resuming: {opened.finished_before} trial(s) already finished; baseline "
            + (f"measured (trial #{base.number})" if base else "not measured yet: it runs first")
        )
    announce_prior(setup, st)
    if not plan.defaults_fit:
        why = "; ".join(plan.why_not)
        console.print(f"[yellow]vLLM's defaults cannot run here ({why})[/yellow]")
        if plan.reference is not None:
            console.print(f"[yellow]baseline: {plan.describe()} (the smallest change that fits)[/yellow]")
        else:
            console.print("[red]no runnable reference in the space: the study will have no baseline[/red]")
    return st, opened.directory


def announce_prior(setup: TuningSetup, st: optuna.Study) -> None:
    """Say what the prior reasoned (console and study log) and enqueue its candidates after the baseline."""
    import logging

    prior = setup.apply_prior()
    if prior is None:
        return
    for line in prior.lines:
        logging.getLogger("autotune.prior").info(line)
        console.print(line, style="dim", markup=False, soft_wrap=True)
    added = prior.enqueue(st)
    if added:
        console.print(f"prior: {len(added)} informed candidate(s) enqueued after the baseline", style="dim")


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
    st: optuna.Study, setup: TuningSetup, evaluator: Any, n_trials: int, timeout: float | None
) -> None:
    formats = st.user_attrs.get(FORMATS_ATTR) or {}
    done = {"n": 0}

    def on_start(number: int, baseline: bool, params: Mapping[str, Any]) -> None:
        what = ("baseline: reference " if params else "baseline: vLLM defaults ") if baseline else ""
        console.print(
            f"[bold]trial {done['n'] + 1}/{n_trials}[/bold] (#{number}) starting: {what}"
            + (fmt_params(params, formats) if params or not baseline else "")
        )

    def on_done(rep: TrialReport) -> None:
        done["n"] += 1
        console.print(trial_line(rep, setup.objective.metric), soft_wrap=True)

    run_study(
        study=st,
        space=setup.space,
        evaluator=evaluator,
        objective=setup.objective,
        n_trials=n_trials,
        timeout_s=timeout,
        on_trial_start=on_start,
        on_trial_done=on_done,
        journal=PendingJournal(Path(evaluator.log_dir)),
        **setup.study_hooks(),
    )


def _confirm_and_export(
    st: optuna.Study, setup: TuningSetup, evaluator: Any, rounds: int, min_improvement: float, target: Path
) -> None:
    from autotune.export import export_best
    from autotune.tuning import confirm_best

    chosen, confirmation = confirm_best(
        st,
        evaluator,
        setup.objective,
        rounds=rounds,
        min_improvement=min_improvement,
        log_dir=Path(evaluator.log_dir) / "confirm",
    )
    if confirmation is not None:
        verdict = "confirmed" if confirmation["confirmed"] else "not confirmed: exporting the baseline"
        console.print(
            f"re-measured trial {confirmation['trial']} against the baseline: {verdict} ({confirmation['why']})"
        )
    checker = setup.checker()

    def check(argv: Any) -> str | None:
        return None if checker is None else checker.check(list(argv)).error

    best, exported = export_best(st, out=target, trial=chosen, check=check)
    out.print(
        f"best: trial {best.number} {setup.objective.metric} = {fmt_value(setup.objective.metric, best.value)}"
    )
    out.print(f"wrote {target}")
    out.print(f"deploy: vllm serve --config {target}")
    out.print(f"or:     {exported.command}", soft_wrap=True)


def _isa_warning(setup: TuningSetup) -> str | None:
    """The CPU build on a CPU it was not built for: the figures would read as the tool's fault."""
    if setup.profile.name != "cpu":
        return None
    from autotune.engine import cpu_build_isa_note

    return cpu_build_isa_note()


def _dry_run(setup: TuningSetup, plan: BaselinePlan, samples: int, seed: int, accept_reference: bool) -> int:
    from autotune.tuning import preview_commands

    if setup.profile_note:
        out.print(f"# {setup.profile_note}")
    if (isa := _isa_warning(setup)) is not None:
        out.print(f"# {isa}", soft_wrap=True)
    previews = preview_commands(
        setup.space, setup.launch, samples=samples, seed=seed, checker=setup.checker(), memory=setup.guard,
        reference=plan.reference,
    )  # fmt: skip
    for pname, reason in setup.space.unsupported.items():
        out.print(f"# not tuned with profile {setup.profile.name}: {pname}: {reason}")
    prior = setup.apply_prior()
    for line in prior.lines if prior is not None else ():
        out.print(f"# {line}", soft_wrap=True)
    out.print(f"# {setup.pass_plan.describe()}; pruning {'on' if setup.choices.prune else 'off'}")
    checked = setup.checker() is not None
    formats = {n: q.format for n, q in setup.space.parameters.items() if q.format}
    for p in previews:
        verdict = (
            f"REJECTED by vLLM's parser: {p.parser_error}"
            if p.parser_error
            else ("accepted by vLLM's parser" if checked else "not checked (--no-check-args)")
        )
        fit = "fits" if not p.fit_reasons else "does not fit: " + "; ".join(p.fit_reasons)
        out.print(f"\n# {p.label}: {fmt_params(p.params, formats)}")
        out.print(f"# {verdict}; memory: {fit if setup.guard is not None else 'not checked'}")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
        out.print((env + " " if env else "") + " ".join(shlex.quote(a) for a in p.argv), soft_wrap=True)
        if p.transfer_config is not None:
            out.print("# --kv-transfer-config:\n" + json.dumps(p.transfer_config, indent=2), soft_wrap=True)
    out.print("\n# dry run: nothing was launched and no study was written (the port is chosen at launch)")
    if plan.defaults_fit:
        return 0
    console.print(f"[yellow]vLLM's defaults cannot run here: {'; '.join(plan.why_not)}[/yellow]")
    console.print(f"the study would measure as its baseline: {plan.describe()}")
    if plan.reference is None:
        return EXIT_NO_BASELINE
    return 0 if accept_reference else EXIT_NO_BASELINE
