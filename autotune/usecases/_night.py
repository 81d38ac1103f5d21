"""The ``night`` use case: one unattended night of tuning (see :mod:`autotune.nightly`) for one engine,
and what follows any night, a group's too: the --on-promote hook and the night's exit code."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import EXIT_BUDGET, EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, ConfigError, PromoteHookError
from autotune.studyfile import StudySpec
from autotune.usecases._open import open_and_announce
from autotune.usecases._reporter import Reporter

if TYPE_CHECKING:
    from autotune.nightly import NightRecord

__all__ = ["NightOutcome", "finish_night", "night"]


@dataclass(frozen=True)
class NightOutcome:
    """How a night ended: its record, the export path it promotes into, and its exit code (see
    :func:`finish_night`)."""

    record: NightRecord
    export: Path
    exit_code: int


def night(spec: StudySpec, reporter: Reporter) -> NightOutcome:
    """One night: re-measure the deployed config against vLLM's defaults, search from the best known
    configs within the budget, and promote a new config only when it beats the incumbent by more than
    tonight's noise; then the hook and the exit code (:func:`finish_night`)."""
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
        reporter.say(bounded.line, soft_wrap=True, markup=False)
    with build_setup(spec) as setup, StudyLock(spec.storage, name, spec.studies_dir):
        setup.check_fixed_flags()
        plan = plan_baseline(setup)
        setup = setup.with_prior()  # once: announced, vetoing, and enqueued after the incumbent
        st, sdir = open_and_announce(setup, name, spec.storage, spec.studies_dir, spec.seed, plan, reporter)
        options = NightOptions(
            budget_s=spec.budget_s,
            out=spec.out or sdir / "best.yaml",
            rounds=spec.rounds,
            min_improvement=spec.min_improvement,
            incumbent=spec.incumbent,
            max_trials=spec.max_trials,
            started=started,
        )

        def say(line: str) -> None:  # the night's lines carry markup
            reporter.say(line, soft_wrap=True)

        record = run_night(engine_night(setup, st, sdir, options, say=say), st)
        record, report, index = write_night_reports(st, sdir, record, setup)
        reporter.say(
            f"report: {report or 'not written (see the log)'}; index of nights: {index or 'not written'}"
        )
    record = dataclasses.replace(record, duration_s=time.monotonic() - started)  # to exit, but the hook
    reporter.show(record.summary(), soft_wrap=True)
    return NightOutcome(record, options.out, finish_night(record, spec, options.out, sdir, reporter))


def finish_night(record: NightRecord, spec: StudySpec, export: Path, sdir: Path, reporter: Reporter) -> int:
    """The hook after a promotion, then the night's exit code: 3 regression (the alarm first: a deployed
    config that no longer runs is a regression too), 4 nothing feasible, 8 no candidate fit the budget."""
    if record.decision == "promoted" and spec.on_promote:
        _deliver(spec, record, export, sdir, reporter)  # after the atomic export; its failure never loses it
    if record.regression:
        return EXIT_REGRESSION
    if record.decision == "nothing_feasible":
        return EXIT_NOTHING_FEASIBLE
    if record.budget_needed_s is not None:
        reporter.show(record.budget_line(), soft_wrap=True, markup=False)
        return EXIT_BUDGET
    return 0


def _deliver(spec: StudySpec, record: NightRecord, export: Path, sdir: Path, reporter: Reporter) -> None:
    """Run --on-promote with the new config, the previous one and the night's figures in its
    environment; a group's: the promoted folder, the replaced files' folder and the group objective
    against the incumbent. A failed hook raises :class:`PromoteHookError` with its own exit code
    (128+N: ended by signal N)."""
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
    reporter.say(f"--on-promote: {result.describe()}", markup=False, soft_wrap=True)
    if not result.ok:
        raise PromoteHookError(
            f"--on-promote: {result.describe()}; {what} is kept (fix: read the hook's log, then "
            f"re-run the hook by hand{fix})",
            exit_code=result.shell_code,
        )
