"""``autotune nightly``: one unattended night of tuning (see :mod:`autotune.nightly`), and
``--history`` to print the nights of a study."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from autotune.cli import _options as o
from autotune.cli._console import console, out
from autotune.cli.run import open_and_announce
from autotune.errors import EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, ConfigError

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["nightly", "parse_duration"]

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """``2h``, ``90m``, ``1h30m``, ``600s`` or ``600`` -> seconds."""
    m = _DURATION.match(text.strip())
    if not text.strip() or not m or not any(m.groups()):
        raise ConfigError(f"--budget: cannot read {text!r} (fix: e.g. 2h, 45m, 1h30m or 900s)")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + s
    if seconds <= 0:
        raise ConfigError(f"--budget: {text!r} is no time at all (fix: e.g. 2h)")
    return seconds


def nightly(
    study: Annotated[str, typer.Option(help="Study name: the nights of one deployment share it.")],
    workload: Annotated[
        Optional[Path],
        typer.Option("--workload", "-w", help="Tonight's workload (JSONL), e.g. yesterday's traffic."),
    ] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model directory or name.")] = None,
    incumbent: Annotated[
        Optional[Path],
        typer.Option(
            help="The deployed config (YAML). Default: the study's last promoted one, else the baseline."
        ),
    ] = None,
    budget: Annotated[str, typer.Option(help="Wall time for the whole night, e.g. 2h or 45m.")] = "2h",
    out_path: Annotated[
        Optional[Path],
        typer.Option(
            "--out", help="Where a promoted config is written. Default: STUDIES_DIR/STUDY/best.yaml."
        ),
    ] = None,
    rounds: Annotated[
        int, typer.Option(min=1, help="A/B rounds per arm for re-measuring and for promotion.")
    ] = 2,
    min_improvement: Annotated[
        float, typer.Option(help="Smallest relative gain (and regression) that counts, whatever the noise.")
    ] = 0.05,
    max_trials: Annotated[Optional[int], typer.Option(min=0, help="Cap on new trials tonight.")] = None,
    history: Annotated[bool, typer.Option("--history", help="Print the study's nights and exit.")] = False,
    profile: o.Profile = None,
    space: o.Space = None,
    storage: o.Storage = None,
    studies_dir: o.StudiesDir = Path("studies"),
    objective: o.ObjectiveMetric = "ttft_p90",
    slo: o.Slo = None,
    min_throughput_ratio: o.MinThroughputRatio = 0.95,
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
    api_key_env: o.ApiKeyEnv = None,
    host_share: o.HostShare = 0.65,
    allow_swap: o.AllowSwap = False,
    check_memory: o.CheckMemory = True,
    check_args: o.CheckArgs = True,
    skip_bad_lines: o.SkipBadLines = False,
    passes: o.Passes = "auto",
    compile_cache: o.CompileCache = None,
    prune: o.Prune = True,
    prior: o.Prior = True,
) -> None:
    """One night: re-measure the deployed config against vLLM's defaults, search from the best known
    configs within --budget, and promote a new config only when it beats the incumbent by more than
    tonight's noise.

    Exit codes: 0 no regression (kept or promoted); 3 regression detected; 4 nothing feasible;
    2 usage error; 6 the study is already running on this host; 1 other error.
    """
    if history:
        _print_history(study, storage, studies_dir)
        return
    if workload is None or model is None:
        raise ConfigError("--workload and --model are needed for a night (fix: pass both, or --history)")
    seconds = parse_duration(budget)
    from autotune.cli._options import tuning_choices
    from autotune.nightly import NightOptions, run_night
    from autotune.tuning import StudyLock, build_setup, check_study_name, plan_baseline

    name = check_study_name(study)
    choices = tuning_choices(
        workload=workload, model=model, profile=profile, space=space, engine_arg=engine_arg, launcher=launcher,
        startup_timeout=startup_timeout, rate=rate, burstiness=burstiness, concurrency=concurrency, speed=speed,
        sample=sample, seed=seed, warmup=warmup, api_key_env=api_key_env, host_share=host_share,
        allow_swap=allow_swap, check_memory=check_memory, check_args=check_args, skip_bad_lines=skip_bad_lines,
        objective=objective, slo=slo, min_throughput_ratio=min_throughput_ratio,
        passes=passes, prune=prune, prior=prior, compile_cache=compile_cache,
    )  # fmt: skip
    with build_setup(choices) as setup, StudyLock(studies_dir, name, what="study"):
        setup.check_fixed_flags()
        plan = plan_baseline(setup)
        st, sdir = open_and_announce(setup, name, storage, studies_dir, seed, plan)
        options = NightOptions(
            budget_s=seconds,
            out=out_path or sdir / "best.yaml",
            rounds=rounds,
            min_improvement=min_improvement,
            incumbent=incumbent,
            max_trials=max_trials,
        )
        record = run_night(setup, st, sdir, options, say=lambda line: console.print(line, soft_wrap=True))
        _write_reports(st, sdir, record, setup.workload.path)
    out.print(record.summary(), soft_wrap=True)
    if record.decision == "nothing_feasible":
        raise typer.Exit(EXIT_NOTHING_FEASIBLE)
    if record.regression:
        raise typer.Exit(EXIT_REGRESSION)


def _write_reports(st: Any, sdir: Path, record: Any, workload: Path) -> None:
    """The night's report and the index across nights; a report that cannot be written is a warning,
    never a failed night (the decision and the export are already made)."""
    from dataclasses import replace

    from autotune.nightly import nights, save_night

    try:
        from autotune.report import write_nightly_index, write_study_report
        from autotune.workload import inspect_workload, load_workload

        night_dir = sdir / f"night-{record.number:04d}"
        wl = inspect_workload(load_workload(workload)).as_dict()
        path = write_study_report(
            st, night_dir / "report.html", workload=wl, fingerprints=record.fingerprints
        )
        save_night(st, replace(record, report=str(path)))
        index = [
            {
                "date": n.date,
                "objective": n.metric,
                "incumbent": n.incumbent_figure or {},
                "promoted": n.decision == "promoted",
                "regression": n.regression,
                "fingerprint_changes": n.changes,
                "report_path": n.report,
                "reason": n.reason,
            }
            for n in nights(st)
        ]
        written = write_nightly_index(index, sdir / "nights.html")
        console.print(f"report: {path}; index of nights: {written}")
    except Exception as exc:
        console.print(f"[yellow]the night's report was not written: {type(exc).__name__}: {exc}[/yellow]")


def _print_history(name: str, storage: str | None, studies_dir: Path) -> None:
    from autotune.cli.study import existing_study
    from autotune.nightly import nights

    st = existing_study(storage, name, studies_dir)
    found = nights(st)
    if not found:
        out.print(f"study {name} has no nights yet (run `autotune nightly --study {name} ...`)")
        return
    table = Table(title=f"nights of study {name}")
    for col in (
        "#",
        "date",
        "incumbent",
        "median [range]",
        "baseline",
        "noise",
        "regression",
        "decision",
        "trials",
        "min",
        "changed",
    ):
        table.add_column(col, overflow="fold")
    for n in found:
        inc, base = n.incumbent_figure, n.baseline_figure
        table.add_row(
            str(n.number),
            n.date[:16],
            n.incumbent_label,
            f"{inc['median']:.4g} [{inc['low']:.4g}-{inc['high']:.4g}]" if inc else "-",
            f"{base['median']:.4g}" if base else "-",
            f"{n.noise_band:.1%}",
            "YES" if n.regression else "no",
            n.decision + (f" #{n.promoted_trial}" if n.promoted_trial is not None else ""),
            str(n.trials),
            f"{n.duration_s / 60:.1f}",
            "; ".join(n.changes) or "-",
        )
    out.print(table)
