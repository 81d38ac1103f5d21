"""The end of a ``run``: the study's table, the trial to export (a doubtful best passed over),
re-measured against the baseline, exported; what was passed over, and how to deploy it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.study import (
    TrialRecord,
    baseline_trial,
    best_feasible,
    choose_export,
    export_costs,
    saturation_summary,
)
from autotune.trial import VllmEvaluator
from autotune.tuning import TuningSetup, forecast_summary
from autotune.usecases._render import fmt_value, study_table
from autotune.usecases._reporter import Reporter

__all__ = ["report_and_export"]


def report_and_export(
    st: optuna.Study, setup: TuningSetup, evaluator: VllmEvaluator, sdir: Path, reporter: Reporter
) -> Path | None:
    """The study's table, then the confirmed best exported: the file written, or None when nothing was
    measured to export (no baseline, no feasible trial)."""
    spec = setup.choices
    reporter.say(study_table(st, setup.objective.metric))
    if baseline_trial(st) is None:
        reporter.say(
            "[red]no baseline was measured[/red]: the study cannot say what it gained over vLLM's "
            "defaults (look at the baseline trial's log)"
        )
        if best_feasible(st) is None:
            return None  # nothing measured to export, not even a reference
    if spec.predict:
        _say_forecast(st, setup, sdir, reporter)
    target = spec.out or sdir / "best.yaml"
    _confirm_and_export(st, setup, evaluator, target, reporter)
    return target


def _say_forecast(st: optuna.Study, setup: TuningSetup, sdir: Path, reporter: Reporter) -> None:
    """The latency model's ledger, vetoes and audits; its calibration saved for `autotune predict`."""
    for line in forecast_summary(st):
        reporter.say(line, markup=False, soft_wrap=True)
    forecast = setup.forecast()
    if forecast is None or forecast.refresh(st) is None:
        return
    cal = forecast.calibration(setup.engine_label, str(setup.space_path))
    if cal is not None:
        path = sdir / "calibration.json"
        cal.save(path)
        reporter.say(
            f"calibration: {path} (autotune predict --calibration {path})", markup=False, soft_wrap=True
        )


def _confirm_and_export(
    st: optuna.Study, setup: TuningSetup, evaluator: VllmEvaluator, target: Path, reporter: Reporter
) -> None:
    """Choose the trial to export (a doubtful best passed over), re-measure it against the baseline,
    export it; say what was passed over, what got worse than the baseline, and how to deploy it."""
    from autotune.export import export_best, exporter_for

    metric, rounds = setup.objective.metric, setup.choices.confirm_rounds
    choice = choose_export(st, metric, floor=setup.choices.min_improvement)
    notes = choice.lines(metric)
    for line in notes:
        reporter.say(line, style="yellow", markup=False, soft_wrap=True)
    chosen, confirmed = _confirm(st, setup, evaluator, choice.trial, reporter)
    notes += confirmed
    if rounds < 1 and not choice.trusted and choice.trial is not None:
        notes.append(
            f"not re-measured (--confirm-rounds 0): trial {choice.trial.number} is exported on that figure alone"
        )
        reporter.say(notes[-1], style="yellow", markup=False, soft_wrap=True)
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
    reporter.show(f"best: trial {best.number} {metric} = {fmt_value(metric, best.value)}")
    if costs:
        reporter.show(costs, soft_wrap=True)
    reporter.show(f"wrote {target}" + ("" if fmt == "vllm-config" else f" ({fmt})"))
    reporter.show(f"deploy: {exporter_for(fmt).deploy_command(exported, target)}", soft_wrap=True)
    reporter.show(f"or:     {exported.command}", soft_wrap=True)
    saturated = saturation_summary(st)
    if saturated is not None:
        reporter.show(saturated, soft_wrap=True)


def _confirm(
    st: optuna.Study,
    setup: TuningSetup,
    evaluator: VllmEvaluator,
    candidate: optuna.trial.FrozenTrial | None,
    reporter: Reporter,
) -> tuple[optuna.trial.FrozenTrial | None, list[str]]:
    """Re-measure ``candidate`` against the baseline: the trial to export, and the lines said (the
    verdict; runs that fell behind their schedule, whose figures are unreliable)."""
    from autotune.tuning import confirm_best

    rounds = setup.choices.confirm_rounds
    progress = _ConfirmProgress(setup.objective.metric, rounds, setup.objective.is_capacity, reporter)
    chosen, confirmation = confirm_best(
        st,
        evaluator,
        setup.objective,
        rounds=rounds,
        min_improvement=setup.choices.min_improvement,
        log_dir=Path(evaluator.log_dir) / "confirm",
        on_run=progress,
        candidate=candidate,
    )
    lines: list[str] = []
    if confirmation is not None:
        lines.append(_verdict_line(confirmation))
        reporter.say(lines[-1], markup=False, soft_wrap=True)
    if progress.behind:
        lines.append(
            f"{len(progress.behind)} of {2 * rounds} confirmation runs fell behind their schedule, so their "
            f"figures are unreliable (first: {progress.behind[0]})"
        )
        reporter.say(lines[-1], style="yellow", markup=False, soft_wrap=True)
    return chosen, lines


@dataclass
class _ConfirmProgress:
    """Says each confirmation run as it ends (the confirmation takes minutes), and keeps the runs
    that fell behind their schedule."""

    metric: str
    rounds: int
    is_capacity: bool
    reporter: Reporter
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
        self.reporter.say(
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
