"""``autotune nightly``: one unattended night of tuning (see :mod:`autotune.nightly`), and
``autotune nightly history`` to print the nights of a study."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.text import Text

from autotune.cli._console import console, out
from autotune.cli._group import announce_prior, open_group_study
from autotune.cli._open import open_and_announce
from autotune.cli._study_options import FILE_HELP, ExportPath, Storage, StudiesDir, study_command
from autotune.errors import EXIT_BUDGET, EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, ConfigError, PromoteHookError
from autotune.studyfile import GroupFile, StudySpec, load_study_file, resolve_spec

if TYPE_CHECKING:
    from autotune.nightly import NightRecord

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["app", "history", "night_group", "nightly", "rollback"]

app = typer.Typer(
    help="One unattended night of tuning; `autotune nightly history` prints a study's nights.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def _say(line: str) -> None:
    console.print(line, soft_wrap=True)


def _say_plain(line: str) -> None:
    console.print(line, soft_wrap=True, markup=False)


def night_group(group: GroupFile, flags: Mapping[str, Any]) -> None:
    """One night of the group study of ``group`` (``nightly -f group.yaml``, see
    :mod:`autotune.nightly._group_night`): the same night, its record and exit codes as one engine's."""
    from autotune.nightly import NightOptions, group_night, process_start, run_night
    from autotune.tuning import GROUP_FINGERPRINT_ATTR, StudyLock, build_group, check_study_name

    started = process_start()
    common = resolve_spec("nightly", flags=flags, file=group.common)
    if "incumbent" in flags or common.incumbent is not None:
        raise ConfigError(
            f"--incumbent: {group.path} is a study of several models on one server: its incumbent is the group "
            "the study deployed into --out (fix: drop --incumbent; give the deployed folder as --out)"
        )
    name = check_study_name(common.study or group.path.stem)
    with build_group(group, flags) as setup, StudyLock(common.storage, name, common.studies_dir):
        study, sdir, _ = open_group_study(common, name)
        if study.get_trials(deepcopy=False) and GROUP_FINGERPRINT_ATTR not in study.user_attrs:
            raise ConfigError(
                f"study {name!r} is a study of one engine, not of this group (fix: another --study name)"
            )
        first = announce_prior(setup, common.prior)
        options = NightOptions(
            budget_s=common.budget_s,
            out=(common.out or sdir / "export").resolve(),
            rounds=common.rounds,
            min_improvement=common.min_improvement,
            max_trials=common.max_trials,
            started=started,
        )
        steps = group_night(
            setup, study, sdir, options, check_args=common.check_args, first=first, say=_say_plain
        )
        record = run_night(steps, study)
    out.print(record.summary(), soft_wrap=True, markup=False)
    _finish(record, common, options.out, sdir)


@app.callback(invoke_without_command=True)
@study_command("nightly", group=night_group)
def nightly(spec: StudySpec) -> None:
    """One night: re-measure the deployed config against vLLM's defaults, search from the best known
    configs within --budget, and promote a new config only when it beats the incumbent by more than
    tonight's noise. With -f a group file (models:), one night of the group study: the deployed group
    in --out against tonight's baseline group, a search, and a promotion of all models or none.

    Exit codes: 0 no regression (kept or promoted); 3 regression detected; 4 nothing feasible;
    2 usage error; 6 the study is already running; 8 the budget could not hold one candidate (the last
    line names the budget the plan needs); 1 other error; when the promoted config was
    exported but --on-promote failed, the hook's own exit code (128+N: killed by signal N).
    """
    from autotune.nightly import (
        NightOptions,
        bound_night_replay,
        engine_night,
        process_start,
        run_night,
        write_night_reports,
    )
    from autotune.tuning import StudyLock, build_setup, check_study_name, plan_baseline

    started = process_start()  # the budget is wall time for the whole night, from here
    if spec.study is None:
        raise ConfigError("nightly: --study is required (fix: the name the nights of one deployment share)")
    name = check_study_name(spec.study)
    bounded = bound_night_replay(spec)  # a traffic folder: yesterday's files, a run's replay <= 10% budget
    spec = bounded.spec
    if bounded.line:
        console.print(bounded.line, soft_wrap=True, markup=False)
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
            started=started,
        )
        record = run_night(engine_night(setup, st, sdir, options, say=_say), st)
        record, report, index = write_night_reports(st, sdir, record, setup)
        console.print(
            f"report: {report or 'not written (see the log)'}; index of nights: {index or 'not written'}"
        )
    record = dataclasses.replace(record, duration_s=time.monotonic() - started)  # to exit, but the hook
    out.print(record.summary(), soft_wrap=True)
    _finish(record, spec, options.out, sdir)


def _finish(record: NightRecord, spec: StudySpec, export: Path, sdir: Path) -> None:
    """The hook after a promotion, then the night's exit code: 3 regression (the alarm first: a deployed
    config that no longer runs is a regression too), 4 nothing feasible, 8 no candidate fit the budget."""
    if record.decision == "promoted" and spec.on_promote:
        _deliver(spec, record, export, sdir)  # after the atomic export; its failure never loses it
    if record.regression:
        raise typer.Exit(EXIT_REGRESSION)
    if record.decision == "nothing_feasible":
        raise typer.Exit(EXIT_NOTHING_FEASIBLE)
    if record.budget_needed_s is not None:
        out.print(record.budget_line(), soft_wrap=True, markup=False)
        raise typer.Exit(EXIT_BUDGET)


StudyFile = Annotated[Optional[Path], typer.Option("--file", "-f", help=FILE_HELP)]
StudyName = Annotated[Optional[str], typer.Option("--study", help="Study name (or `study` in --file).")]


def _named_study(ctx: typer.Context, command: str, file: Path | None, **given: Any) -> StudySpec:
    """The study a subcommand acts on: its own flags < the group's (``nightly -f F rollback``) < the file's.

    Flags override the file, as for ``nightly`` itself; the study name and storage may come from either."""
    group = ctx.parent.obj if ctx.parent is not None and isinstance(ctx.parent.obj, dict) else {}
    file = file or group.get("file")
    flags = {**group.get("flags", {}), **{k: v for k, v in given.items() if v is not None}}
    spec = resolve_spec("nightly", flags=flags, file=load_study_file(file) if file is not None else None)
    if spec.study is None:
        raise ConfigError(
            f"nightly {command}: no study named (fix: --study NAME, or --file a study file with a `study` key)"
        )
    return spec


@app.command("history")
def history(
    ctx: typer.Context,
    file: StudyFile = None,
    study: StudyName = None,
    storage: Storage = None,
    studies_dir: StudiesDir = None,
) -> None:
    """Print the nights of a study: incumbent, noise, regression, decision, trials, what changed."""
    from rich.table import Table

    from autotune.nightly import history_table

    spec = _named_study(ctx, "history", file, study=study, storage=storage, studies_dir=studies_dir)
    assert spec.study is not None
    found = history_table(spec.study, spec.storage, spec.studies_dir)
    if not found.rows:
        out.print(found.title, soft_wrap=True, markup=False)
        return
    table = Table(title=found.title, title_justify="left")
    for name in found.columns:
        table.add_column(name, overflow="fold", no_wrap=name in ("night", "figure", "trials", "time"))
    for row in found.rows:
        table.add_row(*(Text(cell) for cell in row))  # cells as text: a reason's [..] is no markup
    out.print(table)


def _deliver(spec: StudySpec, record: NightRecord, export: Path, sdir: Path) -> None:
    """Run --on-promote with the new config, the previous one and the night's figures in its
    environment; a group's: the promoted folder, the replaced files' folder and the group objective
    against the incumbent. A failed hook exits with its own code (128+N: ended by signal N)."""
    from autotune.nightly import promoted_history, run_on_promote

    assert spec.on_promote is not None
    if record.group is None:
        kept = promoted_history(export, export.parent / "history")
        previous = kept[-2] if len(kept) >= 2 else None
        figures = {
            "best_value": (record.incumbent_figure or {}).get("median", float("nan")),
            "baseline_value": (record.baseline_figure or {}).get("median", float("nan")),
        }
        what, fix, objective, logs = (
            f"the export {export}",
            ", or `autotune nightly rollback`",
            record.metric,
            None,
        )
    else:
        previous = Path(record.group["previous"]) if record.group.get("previous") else None
        figures = {"group_objective": float(record.group.get("promoted_value") or 0.0)}
        what, fix, objective, logs = f"the group in {export}", "", "group", sdir / "promote-logs"
    result = run_on_promote(
        spec.on_promote,
        new_config=export,
        previous_config=previous,
        figures=figures,
        night=str(record.number),
        timeout_s=spec.on_promote_timeout,
        objective=objective,
        log_dir=logs,
        scrub=[spec.api_key_env] if spec.api_key_env else [],
    )
    console.print(f"--on-promote: {result.describe()}", markup=False, soft_wrap=True)
    if not result.ok:
        raise PromoteHookError(
            f"--on-promote: {result.describe()}; {what} is kept (fix: read the hook's log, then "
            f"re-run the hook by hand{fix})",
            exit_code=result.shell_code,
        )


@app.command("rollback")
def rollback(
    ctx: typer.Context,
    file: StudyFile = None,
    study: StudyName = None,
    studies_dir: StudiesDir = None,
    out_path: ExportPath = None,
) -> None:
    """Restore the previous promoted config into the export path (atomically); the withdrawn one is kept.
    The --on-promote hook is not run: deliver the restored file as a promotion is delivered."""
    from autotune.nightly import rollback as restore

    spec = _named_study(ctx, "rollback", file, study=study, studies_dir=studies_dir, out=out_path)
    assert spec.study is not None
    export = Path(spec.out) if spec.out else Path(spec.studies_dir) / spec.study / "best.yaml"
    restored, withdrawn = restore(export, export.parent / "history")
    out.print(f"restored {restored} into {export}; the withdrawn config is kept as {withdrawn}")
