"""``autotune compare``: re-measure two configurations alternately, exactly as study trials are measured
(the use case: :func:`autotune.usecases.compare`)."""

from __future__ import annotations

import typer
from rich.table import Table

from autotune import usecases
from autotune.cli._console import ConsoleReporter, console, out
from autotune.cli._study_options import study_command
from autotune.metrics import COMPARED, shown_in
from autotune.studyfile import StudySpec
from autotune.trial import Comparison

__all__ = ["compare"]

_ROWS = shown_in(COMPARED)


@study_command("compare")
def compare(spec: StudySpec) -> None:
    """Measure arm A (defaults) and arm B (a config) alternately and report medians, spread and ratio.

    Exit codes: 0 both arms measured; 1 an arm produced no figures; 2 bad input (an arm that cannot
    start here is refused before any launch).
    """
    outcome = usecases.compare(spec, ConsoleReporter())
    out.print(_table(outcome.result, outcome.title))
    for line in outcome.warnings:
        console.print(f"[yellow]{line}[/yellow]", soft_wrap=True)
    if outcome.json_out is not None:
        out.print(f"wrote {outcome.json_out}")
    if outcome.failed:
        names = " and ".join(outcome.failed)
        console.print(
            f"[red]no figures in {names}[/red]"
            if outcome.recorded
            else f"[red]no figures from {names}[/red]: every run failed (see {spec.log_dir})"
        )
        raise typer.Exit(outcome.exit_code)


def _table(result: Comparison, title: str) -> Table:
    table = Table(title=f"{title}; median [min-max]")
    table.add_column("figure")
    for arm in (result.a, result.b):
        table.add_column(arm.name)
    table.add_column("B / A")
    for name in _ROWS:
        if name not in result.a.figures and name not in result.b.figures:
            continue
        cells = []
        for arm in (result.a, result.b):
            med, spread = arm.median(name), arm.spread(name)
            cells.append(
                f"{med:.3g} [{spread[0]:.3g}-{spread[1]:.3g}]" if med is not None and spread else "-"
            )
        ratio = result.ratio(name)
        table.add_row(name, *cells, f"{ratio:.2f}x" if ratio else "-")
    return table
