"""``autotune nightly``: one unattended night of tuning (see :mod:`autotune.nightly`), and
``autotune nightly history`` to print the nights of a study."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from autotune import usecases
from autotune.cli._console import ConsoleReporter, out
from autotune.cli._study_options import FILE_HELP, ExportPath, Storage, StudiesDir, study_command
from autotune.errors import ConfigError
from autotune.studyfile import GroupFile, StudySpec, load_study_file, resolve_spec

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["app", "history", "night_group", "nightly", "rollback"]

app = typer.Typer(
    help="One unattended night of tuning; `autotune nightly history` prints a study's nights.",
    invoke_without_command=True,
    no_args_is_help=False,
)


def night_group(group: GroupFile, flags: Mapping[str, Any]) -> None:
    """One night of the group study of ``group`` (``nightly -f group.yaml``; the use case is
    :func:`autotune.usecases.night_group`): the same night, its record and exit codes as one engine's."""
    code = usecases.night_group(group, flags, ConsoleReporter()).exit_code
    if code:
        raise typer.Exit(code)


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
    outcome = usecases.night(spec, ConsoleReporter())
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)


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
