"""Opening a study for a use case: open it, and say what this run starts from (the profile, what is
not tuned, a resume, the prior's reasoning, the baseline plan). Shared by ``run`` and ``night``."""

from __future__ import annotations

import logging
from pathlib import Path

import optuna

from autotune.engine import startup_warnings
from autotune.study import baseline_saturation, baseline_trial, read_record, redact_url
from autotune.tuning import BaselinePlan, TuningSetup, open_study, record_effective_study
from autotune.usecases._reporter import Reporter

__all__ = ["announce_prior", "enqueue_prior", "open_and_announce"]


def open_and_announce(
    setup: TuningSetup,
    name: str,
    storage: str | None,
    studies_dir: Path,
    seed: int,
    plan: BaselinePlan,
    reporter: Reporter,
) -> tuple[optuna.Study, Path]:
    """Open the study (see :func:`autotune.tuning.open_study`) and say what this run starts from."""

    opened = open_study(setup, name, storage, studies_dir, seed, plan)
    reporter.log_to(opened.directory / "study.log")
    st = opened.study
    if opened.previous_profile:
        reporter.say(
            f"[yellow]study {name} ran with profile {opened.previous_profile}; this run uses {setup.profile.name}[/yellow]"
        )
    for pname, reason in setup.space.unsupported.items():
        reporter.say(f"[dim]not tuned with profile {setup.profile.name}: {pname}: {reason}[/dim]")
    for line in setup.space_lines():
        reporter.say(line, markup=False, soft_wrap=True)
    for warning in startup_warnings(setup.profile):
        reporter.say(f"[yellow]{warning}[/yellow]", soft_wrap=True)
    if opened.recovered:
        reporter.say(f"recovered {opened.recovered} measured trial(s) that a storage fault had kept locally")
    if opened.shm_cleaned is not None and opened.shm_cleaned.removed:
        reporter.say(opened.shm_cleaned.summary())
    reporter.say(
        f"study [bold]{name}[/bold] in {redact_url(opened.url)} | {setup.engine_label} | space {setup.space_path} | "
        f"workload {setup.choices.workload} ({len(setup.workload)} requests, {setup.arrival.describe()}) | "
        f"objective {setup.objective.direction} {setup.objective.metric} | fingerprint {record_effective_study(st, setup)}"
    )
    if setup.capacity is not None:
        reporter.say(setup.capacity.describe(), markup=False, soft_wrap=True)
    if opened.finished_before:
        base = baseline_trial(st)
        reporter.say(
            f"resuming: {opened.finished_before} trial(s) already finished; baseline "
            + (f"measured (trial #{base.number})" if base else "not measured yet: it runs first")
        )
        saturated = baseline_saturation(read_record(base)) if base is not None else None
        if saturated is not None:
            reporter.say(saturated, style="bold red", markup=False, soft_wrap=True)
    announce_prior(setup, reporter)
    if not plan.defaults_fit:
        why = "; ".join(plan.why_not)
        reporter.say(f"[yellow]vLLM's defaults cannot run here ({why})[/yellow]")
        if plan.reference is not None:
            reporter.say(f"[yellow]baseline: {plan.describe()} (the smallest change that fits)[/yellow]")
        else:
            reporter.say("[red]no runnable reference in the space: the study will have no baseline[/red]")
    return st, opened.directory


def announce_prior(setup: TuningSetup, reporter: Reporter) -> None:
    """Say what the prior reasoned (console and study log); ``setup`` the study's: its prior built, see
    :meth:`TuningSetup.with_prior`. Its candidates are enqueued by the command, after what it measures
    first (:func:`enqueue_prior` after the baseline; a night after its incumbent)."""
    prior = setup.prior
    if prior is None:
        return
    for line in prior.lines:
        logging.getLogger("autotune.prior").info(line)
        reporter.say(line, style="dim", markup=False, soft_wrap=True)


def enqueue_prior(setup: TuningSetup, st: optuna.Study, reporter: Reporter) -> None:
    """Enqueue the prior's candidates after the baseline (``run``; a night enqueues them itself,
    after its incumbent, autotune/nightly/_night.py)."""
    added = setup.prior.enqueue(st) if setup.prior is not None else []
    if added:
        reporter.say(f"prior: {len(added)} informed candidate(s) enqueued after the baseline", style="dim")
