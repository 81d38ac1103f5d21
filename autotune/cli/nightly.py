"""``autotune nightly``: one unattended night of tuning (see :mod:`autotune.nightly`), and
``autotune nightly history`` to print the nights of a study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._console import console, out
from autotune.cli._open import open_and_announce
from autotune.cli._study_options import ExportPath, Storage, StudiesDir, study_command
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
    2 usage error; 6 the study is already running; 1 other error; when the promoted config was
    exported but --on-promote failed, the hook's own exit code (128+N: killed by signal N).
    """
    from autotune.nightly import NightOptions, run_night, write_night_reports
    from autotune.tuning import StudyLock, build_setup, check_study_name, plan_baseline

    if spec.study is None:
        raise ConfigError("nightly: --study is required (fix: the name the nights of one deployment share)")
    name = check_study_name(spec.study)
    with build_setup(spec) as setup, StudyLock(spec.storage, name, spec.studies_dir):
        setup.check_fixed_flags()
        plan = plan_baseline(setup)
        setup = setup.with_prior()  # once: announced, vetoing, and enqueued after the incumbent
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
        record, report, index = write_night_reports(st, sdir, record, setup)
        console.print(
            f"report: {report or 'not written (see the log)'}; index of nights: {index or 'not written'}"
        )
    out.print(record.summary(), soft_wrap=True)
    if record.decision == "promoted" and spec.on_promote:
        _deliver(spec, record, options.out)  # after the atomic export; its failure never loses it
    if record.regression:  # the alarm first: a deployed config that no longer runs is a regression too
        raise typer.Exit(EXIT_REGRESSION)
    if record.decision == "nothing_feasible":
        raise typer.Exit(EXIT_NOTHING_FEASIBLE)


@app.command("history")
def history(
    study: Annotated[str, typer.Option(help="Study name.")],
    storage: Storage = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Print the nights of a study: incumbent, noise, regression, decision, trials, what changed."""
    from autotune.nightly import history_lines

    for line in history_lines(study, storage, studies_dir):
        out.print(line, soft_wrap=True, markup=False)


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
    if not result.ok:  # the night exits with the hook's own code (128+N: ended by signal N)
        raise PromoteHookError(
            f"--on-promote: {result.describe()}; the export {export} is kept (fix: read the hook's log, then "
            "re-run the hook by hand, or `autotune nightly rollback`)",
            exit_code=result.shell_code,
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
