"""``run`` for a group file (``models:``, ``share:``): a study of several models on one server,
every trial the whole group, its value the group's objective; the best re-measured against the
baseline group and exported with its launch file (``--dry-run``: each engine's command, nothing
launched)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.errors import EXIT_NO_BASELINE
from autotune.studyfile import GroupFile, StudySpec, resolve_spec
from autotune.tuning import (
    GroupEvaluator,
    GroupPreview,
    GroupSetup,
    GroupTrialReport,
    baseline_group_trial,
    best_group_trial,
    build_group,
    check_group_fingerprint,
    confirm_group,
    export_group,
    preview_group,
    record_deployed,
    run_group_study,
)
from autotune.usecases._group_open import announce_prior, group_header, open_group_study
from autotune.usecases._render import fmt_params
from autotune.usecases._reporter import Reporter
from autotune.usecases._run import RunOutcome

__all__ = ["run_group"]


def run_group(group: GroupFile, flags: Mapping[str, Any], reporter: Reporter) -> RunOutcome:
    """The group study of ``group`` (flags as given on the command line, applied to every model)."""
    common = resolve_spec("run", flags=flags, file=group.common)
    with build_group(group, flags) as setup:
        if not common.dry_run:
            return _run(setup, common, reporter)
        return RunOutcome(_dry_run(setup, common.dry_run_samples, common.seed, common.prior, reporter))


def _run(setup: GroupSetup, common: StudySpec, reporter: Reporter) -> RunOutcome:
    """The group study: every trial the whole group, its value the group's objective."""
    name = common.study or setup.file.path.stem
    study, sdir, url = open_group_study(common, name)
    check_group_fingerprint(study, setup)  # a resumed study is the same group, or it is refused
    group_header(setup, reporter)
    first = announce_prior(setup, common.prior, reporter)
    evaluate = GroupEvaluator(setup, sdir / "logs", check_args=common.check_args)
    earlier = baseline_group_trial(study)
    if earlier is not None:
        done = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        reporter.show(
            f"# resuming study {name}: {done} group trial(s) stand, the baseline group is trial {earlier.number}; "
            f"{common.n_trials} more",
            markup=False,
            soft_wrap=True,
        )

    saturated: dict[str, list[int]] = {}  # model -> the trials it saturated in, of this run's
    measured: list[int] = []  # this run's trials that measured every model
    show = _shower(setup, saturated, measured, reporter)
    run_group_study(setup, evaluate, study, n_trials=common.n_trials, first=first, on_done=show)
    best = best_group_trial(study)
    base = baseline_group_trial(study)
    if best is None or base is None:
        reporter.show(f"no group trial was measured (study {name}, {url})", soft_wrap=True)
        return RunOutcome(EXIT_NO_BASELINE, name)
    reporter.show(
        f"best: trial {best.number}, group objective {best.value:.3f} (study {name}, {url})", soft_wrap=True
    )
    _always_saturated(saturated, measured, reporter)
    chosen, header = _confirm(setup, evaluate, study, base, best, common, reporter)
    target = common.out or sdir / "export"
    written = export_group(setup, evaluate, chosen, target, header, export_format=common.export_format)
    record_deployed(study, chosen, written)  # a night re-measures it as its incumbent
    for model, path in written.configs.items():
        reporter.show(f"wrote {path} ({model})", soft_wrap=True)
    reporter.show(f"launch the group as measured: sh {written.launch}", soft_wrap=True)
    if written.group_file is not None:
        reporter.show(f"wrote {written.group_file} ({common.export_format}: every model)", soft_wrap=True)
        reporter.show(f"deploy: {written.deploy}", soft_wrap=True)
    return RunOutcome(0, name, target)


def _shower(
    setup: GroupSetup, saturated: dict[str, list[int]], measured: list[int], reporter: Reporter
) -> Callable[[GroupTrialReport], None]:
    """Each group trial's line as it ends; the models that saturated their engine, noted."""

    def show(rep: GroupTrialReport) -> None:
        ratios = ", ".join(f"{n} {r:.3f}" for n, r in rep.ratios.items())
        verdict = (
            f"group objective {rep.value:.3f} ({ratios})"
            if rep.value is not None
            else f"FAILED: {rep.reason}"
        )
        held = f"; {rep.capacity}" if rep.capacity else ""
        reporter.show(
            f"trial {rep.number} ({rep.label}): {setup.describe_split(rep.split)}: {verdict}{held}",
            soft_wrap=True,
        )
        if rep.ratios:
            measured.append(rep.number)
        for model, note in rep.saturated.items():
            saturated.setdefault(model, []).append(rep.number)
            reporter.show(
                f"  {model} saturated its engine: its requests queued behind the arrivals, so its figures "
                f"measure that queue, not the split ({note})",
                style="bold red",
                markup=False,
                soft_wrap=True,
            )

    return show


def _always_saturated(saturated: dict[str, list[int]], measured: list[int], reporter: Reporter) -> None:
    """A model that saturated its engine in every measured trial makes the best no evidence."""
    for model, trials in saturated.items():
        if measured and len(trials) >= len(measured):
            reporter.show(
                f"{model} saturated its engine in every measured group trial ({len(trials)} of {len(measured)}): "
                "its figures measure its queue, not the split, so the best is no evidence of a better split "
                "(fix: a lower speed or rate for that model, or fewer models on this machine)",
                style="bold red",
                markup=False,
                soft_wrap=True,
            )


def _confirm(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    study: optuna.Study,
    base: optuna.trial.FrozenTrial,
    best: optuna.trial.FrozenTrial,
    common: StudySpec,
    reporter: Reporter,
) -> tuple[optuna.trial.FrozenTrial, list[str]]:
    """The group trial to export (the best, if the re-measurement confirms it; else the baseline
    group) and the export header's lines."""
    header = [f"study {study.study_name!r}, group trial {best.number}, group objective {best.value:.3f}"]
    if best.number == base.number:
        reporter.show("the baseline group was best: it is exported as it runs today", soft_wrap=True)
        return base, [*header, "the baseline group was best"]
    if common.confirm_rounds < 1:
        line = f"not re-measured (--confirm-rounds 0): trial {best.number} is exported on that figure alone"
        reporter.show(line, soft_wrap=True)
        return best, [*header, line]

    def said(arm: str, r: int, res: Any) -> None:
        verdict = (
            f"group objective {res.score.value:.3f}"
            if res.score.value is not None
            else f"FAILED: {res.reason}"
        )
        reporter.show(f"confirm round {r + 1}: {arm}: {verdict}", soft_wrap=True)

    first = max(t.number for t in study.get_trials(deepcopy=False)) + 1
    done = confirm_group(
        setup, evaluate, base, best, rounds=common.confirm_rounds, min_improvement=common.min_improvement,
        first_number=first, on_run=said,
    )  # fmt: skip
    study.set_user_attr(f"group_confirmation_{best.number}", {"confirmed": done.confirmed, "why": done.why})
    reporter.show(f"re-measured against the baseline group: {done.why}", soft_wrap=True)
    if done.confirmed:
        return best, [*header, f"confirmed: {done.why}"]
    return base, [*header, f"trial {best.number} not confirmed ({done.why}); the baseline group is exported"]


def _print(setup: GroupSetup, p: GroupPreview, reporter: Reporter) -> None:
    used = setup.budget.describe(p.budget_used / setup.budget.total)
    reporter.show(f"\n# {p.label}: {setup.describe_split(p.split)}; in all {used}", soft_wrap=True)
    fit = "fits" if not p.infeasible else "INFEASIBLE before launch: " + "; ".join(p.infeasible)
    reporter.show(f"# {fit}", markup=False, soft_wrap=True)
    for e, m in zip(p.engines, setup.models, strict=True):
        verdict = (
            f"REJECTED by vLLM's parser: {e.parser_error}"
            if e.parser_error
            else ("accepted by vLLM's parser" if e.checked else "not checked (--no-check-args)")
        )
        formats = {n: q.format for n, q in m.setup.space.parameters.items() if q.format}
        own = p.values.get(e.name) or {}
        reporter.show(
            f"# {e.name}: {verdict}" + (f"; {fmt_params(own, formats)}" if own else ""), markup=False
        )
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in e.env.items())
        reporter.show((env + " " if env else "") + " ".join(shlex.quote(a) for a in e.argv), soft_wrap=True)


def _dry_run(setup: GroupSetup, samples: int, seed: int, use_prior: bool, reporter: Reporter) -> int:
    group_header(setup, reporter)
    first = announce_prior(setup, use_prior, reporter)
    previews = preview_group(setup, samples=samples, seed=seed, first=first)
    for p in previews:
        _print(setup, p, reporter)
    reporter.show(
        "\n# dry run: nothing was launched and no study was written (each engine's port is chosen at launch)"
    )
    if setup.notes:  # a GPU profile previewed on a machine that cannot run it: the preview is the point
        return 0
    return EXIT_NO_BASELINE if previews[0].infeasible else 0
