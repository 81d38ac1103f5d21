"""``autotune nightly``: one unattended night of tuning (see :mod:`autotune.nightly`), and
``autotune nightly history`` to print the nights of a study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autotune.cli._console import console, out
from autotune.cli._study_options import ExportPath, Storage, StudiesDir, study_command
from autotune.cli.run import open_and_announce
from autotune.errors import EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, ConfigError, PromoteHookError
from autotune.spec import StudySpec

__all__ = ["app", "history", "nightly", "rollback"]

app = typer.Typer(
    help="One unattended night of tuning; `autotune nightly history` prints a study's nights.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback(invoke_without_command=True)
@study_command("nightly")
def nightly(spec: StudySpec) -> None:
    """One night: re-measure the deployed config against vLLM's defaults, search from the best known
    configs within --budget, and promote a new config only when it beats the incumbent by more than
    tonight's noise.

    Exit codes: 0 no regression (kept or promoted); 3 regression detected; 4 nothing feasible;
    2 usage error; 6 the study is already running; 1 other error.
    """
    from autotune.nightly import NightOptions, run_night
    from autotune.tuning import StudyLock, build_setup, check_study_name, plan_baseline

    if spec.study is None:
        raise ConfigError("nightly: --study is required (fix: the name the nights of one deployment share)")
    name = check_study_name(spec.study)
    with build_setup(spec) as setup, StudyLock(spec.storage, name, spec.studies_dir):
        setup.check_fixed_flags()
        plan = plan_baseline(setup)
        st, sdir = open_and_announce(setup, name, spec.storage, spec.studies_dir, spec.seed, plan)
        options = NightOptions(
            budget_s=spec.budget_s,
            out=spec.out or sdir / "best.yaml",
            rounds=spec.rounds,
            min_improvement=spec.min_improvement,
            incumbent=spec.incumbent,
            max_trials=spec.max_trials,
        )
        record = run_night(setup, st, sdir, options, say=lambda line: console.print(line, soft_wrap=True))
        _write_reports(st, sdir, record, setup.workload.path)
    out.print(record.summary(), soft_wrap=True)
    if record.decision == "promoted" and spec.on_promote:
        _deliver(spec, record, options.out)  # after the atomic export; its failure never loses it (exit 7)
    if record.decision == "nothing_feasible":
        raise typer.Exit(EXIT_NOTHING_FEASIBLE)
    if record.regression:
        raise typer.Exit(EXIT_REGRESSION)


@app.command("history")
def history(
    study: Annotated[str, typer.Option(help="Study name.")],
    storage: Storage = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Print the nights of a study: incumbent, noise, regression, decision, trials, what changed."""
    _print_history(study, storage, studies_dir)


def _deliver(spec: StudySpec, record: Any, export: Path) -> None:
    """Run --on-promote with the new config, the previous one and the night's figures in its environment."""
    from autotune.nightly import promoted_history, run_on_promote

    assert spec.on_promote is not None
    kept = promoted_history(export, export.parent / "history")
    figures = {
        "best_value": (record.incumbent_figure or {}).get("median", float("nan")),
        "baseline_value": (record.baseline_figure or {}).get("median", float("nan")),
    }
    result = run_on_promote(
        spec.on_promote,
        new_config=export,
        previous_config=kept[-2] if len(kept) >= 2 else None,
        figures=figures,
        night=str(record.number),
        timeout_s=spec.on_promote_timeout,
        objective=record.metric,
        scrub=[spec.api_key_env] if spec.api_key_env else [],
    )
    console.print(f"--on-promote: {result.describe()}", markup=False, soft_wrap=True)
    if not result.ok:
        raise PromoteHookError(
            f"--on-promote: {result.describe()}; the export {export} is kept (fix: read the hook's log, then "
            "re-run the hook by hand, or `autotune nightly rollback`)"
        )


@app.command("rollback")
def rollback(
    study: Annotated[str, typer.Option(help="Study name.")],
    studies_dir: StudiesDir = Path("studies"),
    out_path: ExportPath = None,
) -> None:
    """Restore the previous promoted config into the export path (atomically); the withdrawn one is kept.
    The --on-promote hook is not run: deliver the restored file as a promotion is delivered."""
    from autotune.nightly import rollback as restore

    export = Path(out_path) if out_path else Path(studies_dir) / study / "best.yaml"
    restored, withdrawn = restore(export, export.parent / "history")
    out.print(f"restored {restored} into {export}; the withdrawn config is kept as {withdrawn}")


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
            f"{n.noise_band:.1%}" if n.noise_band is not None else "-",
            "YES" if n.regression else "no",
            n.decision + (f" #{n.promoted_trial}" if n.promoted_trial is not None else ""),
            str(n.trials),
            f"{n.duration_s / 60:.1f}",
            "; ".join(n.changes) or "-",
        )
    out.print(table)
