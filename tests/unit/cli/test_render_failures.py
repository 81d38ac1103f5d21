"""Trial lines and the study table say why requests failed, and say a status once (issue 30)."""

from __future__ import annotations

import optuna
from rich.console import Console

from autotune.study import Figures, TrialRecord, TrialReport, TrialStatus
from autotune.usecases import study_table, trial_line

REFUSED = (
    "HTTP 400: Either prompt or prompt_embeds must be provided and non-empty. (at w.jsonl:2, id 'q-empty')"
)


def _plain(markup: str) -> str:
    console = Console(width=400, record=True)
    console.print(markup)
    return console.export_text()


def _report(rec: TrialRecord) -> TrialReport:
    return TrialReport(
        number=3, params={}, record=rec, value=120.0, feasible=False, best_number=None, best_value=None
    )


def test_a_trial_line_names_the_request_the_server_refused() -> None:
    figures = Figures({"completed": 9, "failed": 1, "output_throughput": 5.0, "failures": {REFUSED: 1}})
    line = _plain(trial_line(_report(TrialRecord(status=TrialStatus.OK, figures=figures)), "ttft_p90"))
    assert "failed=1" in line and f"({REFUSED})" in line


def test_a_pruned_trial_says_pruned_once() -> None:
    rec = TrialRecord(
        status=TrialStatus.PRUNED, failure="pruned", reason="ttft_p90 400 ms after 1 of 4 checks"
    )
    line = _plain(trial_line(_report(rec), "ttft_p90"))
    assert line.count("pruned") == 1, line

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.add_trial(
        optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED, user_attrs=rec.to_attrs())
    )
    console = Console(width=250, record=True)
    console.print(study_table(study, "ttft_p90"))
    table = console.export_text()
    assert "pruned" in table and "pruned (pruned)" not in table


def test_the_objective_figure_is_printed_once_when_it_is_ttft_p50() -> None:
    figures = Figures(
        {"completed": 9, "failed": 0, "output_throughput": 5.0, "percentiles_ms": {"ttft_p50": 120.0}}
    )
    rec = TrialRecord(status=TrialStatus.OK, figures=figures)
    assert _plain(trial_line(_report(rec), "ttft_p50")).count("ttft_p50=") == 1  # the demo's objective
    assert _plain(trial_line(_report(rec), "ttft_p90")).count("ttft_p50=") == 1  # beside another one
