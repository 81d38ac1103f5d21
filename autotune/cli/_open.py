"""Opening a study for a command: open it, and say what this run starts from (the profile, what is
not tuned, a resume, the prior's reasoning, the baseline plan). Shared by ``run`` and ``nightly``, so
that no command imports another."""

from __future__ import annotations

import logging
from pathlib import Path

import optuna

from autotune.cli._console import console, log_to_file
from autotune.engine import startup_warnings
from autotune.errors import StudyNotFoundError
from autotune.study import baseline_saturation, baseline_trial, read_record, redact_url
from autotune.tuning import BaselinePlan, TuningSetup, open_study, record_effective_study

__all__ = ["announce_prior", "enqueue_prior", "existing_study", "open_and_announce"]


def open_and_announce(
    setup: TuningSetup, name: str, storage: str | None, studies_dir: Path, seed: int, plan: BaselinePlan
) -> tuple[optuna.Study, Path]:
    """Open the study (see :func:`autotune.tuning.open_study`) and say what this run starts from."""

    opened = open_study(setup, name, storage, studies_dir, seed, plan)
    log_to_file(opened.directory / "study.log")
    st = opened.study
    if opened.previous_profile:
        console.print(
            f"[yellow]study {name} ran with profile {opened.previous_profile}; this run uses {setup.profile.name}[/yellow]"
        )
    for pname, reason in setup.space.unsupported.items():
        console.print(f"[dim]not tuned with profile {setup.profile.name}: {pname}: {reason}[/dim]")
    for line in setup.space_lines():
        console.print(line, markup=False, soft_wrap=True)
    for warning in startup_warnings(setup.profile):
        console.print(f"[yellow]{warning}[/yellow]", soft_wrap=True)
    if opened.recovered:
        console.print(f"recovered {opened.recovered} measured trial(s) that a storage fault had kept locally")
    if opened.shm_cleaned is not None and opened.shm_cleaned.removed:
        console.print(opened.shm_cleaned.summary())
    console.print(
        f"study [bold]{name}[/bold] in {redact_url(opened.url)} | {setup.engine_label} | space {setup.space_path} | "
        f"workload {setup.choices.workload} ({len(setup.workload)} requests, {setup.arrival.describe()}) | "
        f"objective {setup.objective.direction} {setup.objective.metric} | fingerprint {record_effective_study(st, setup)}"
    )
    if setup.capacity is not None:
        console.print(setup.capacity.describe(), markup=False, soft_wrap=True)
    if opened.finished_before:
        base = baseline_trial(st)
        console.print(
            f"resuming: {opened.finished_before} trial(s) already finished; baseline "
            + (f"measured (trial #{base.number})" if base else "not measured yet: it runs first")
        )
        saturated = baseline_saturation(read_record(base)) if base is not None else None
        if saturated is not None:
            console.print(saturated, style="bold red", markup=False, soft_wrap=True)
    announce_prior(setup, st)
    if not plan.defaults_fit:
        why = "; ".join(plan.why_not)
        console.print(f"[yellow]vLLM's defaults cannot run here ({why})[/yellow]")
        if plan.reference is not None:
            console.print(f"[yellow]baseline: {plan.describe()} (the smallest change that fits)[/yellow]")
        else:
            console.print("[red]no runnable reference in the space: the study will have no baseline[/red]")
    return st, opened.directory


def announce_prior(setup: TuningSetup, st: optuna.Study) -> None:
    """Say what the prior reasoned (console and study log); ``setup`` the study's: its prior built, see
    :meth:`TuningSetup.with_prior`. Its candidates are enqueued by the command, after what it measures
    first (:func:`enqueue_prior` after the baseline; a night after its incumbent)."""
    prior = setup.prior
    if prior is None:
        return
    for line in prior.lines:
        logging.getLogger("autotune.prior").info(line)
        console.print(line, style="dim", markup=False, soft_wrap=True)


def enqueue_prior(setup: TuningSetup, st: optuna.Study) -> None:
    """Enqueue the prior's candidates after the baseline (``run``; a night enqueues them itself,
    after its incumbent, autotune/nightly/_night.py)."""
    added = setup.prior.enqueue(st) if setup.prior is not None else []
    if added:
        console.print(f"prior: {len(added)} informed candidate(s) enqueued after the baseline", style="dim")


def existing_study(storage: str | None, name: str, studies_dir: Path) -> optuna.Study:
    """Open a study that exists, read-only in intent: nothing is created or written."""
    from autotune.study import open_storage, resolve_storage_url

    url = resolve_storage_url(storage, name, studies_dir)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise StudyNotFoundError(f"--study: no study named {name!r} (no {url.removeprefix('sqlite:///')})")
    st = open_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(st)]
    if name not in names:
        raise StudyNotFoundError(f"--study: no study named {name!r} (known: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=name, storage=st)
