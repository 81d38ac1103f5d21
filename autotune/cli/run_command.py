"""``autotune run``: baseline first, then Optuna's proposals; confirm the best; export it
(the use case: :func:`autotune.usecases.run`)."""

from __future__ import annotations

import typer

from autotune import usecases
from autotune.cli._console import ConsoleReporter
from autotune.cli._group import run_group
from autotune.cli._study_options import study_command
from autotune.studyfile import StudySpec

__all__ = ["run"]


@study_command("run", group=run_group)
def run(spec: StudySpec) -> None:
    """Tune vLLM on a workload: baseline (vLLM defaults) first, then Optuna's proposals; export the best.

    Exit codes: 0 done; 1 storage or other error; 2 bad input; 5 no baseline could be measured (the export
    says so); 6 the study is already running; 130 interrupted.
    """
    outcome = usecases.run(spec, ConsoleReporter())
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)
