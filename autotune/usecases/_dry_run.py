"""``run --dry-run``: the fingerprint, the space, and the commands the study would launch, each with
the parser's and the memory check's verdicts; nothing launched, no study written."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from autotune.engine import startup_warnings
from autotune.errors import EXIT_NO_BASELINE
from autotune.tuning import BaselinePlan, CommandPreview, TuningSetup, effective_fingerprint
from autotune.usecases._render import fmt_params
from autotune.usecases._reporter import Reporter

__all__ = ["dry_run"]


def dry_run(setup: TuningSetup, plan: BaselinePlan, reporter: Reporter) -> int:
    """Show what the study would launch; the exit code (see :func:`_dry_run_exit`)."""
    from autotune.tuning import preview_commands

    spec = setup.choices
    show = reporter.show
    show(f"# study fingerprint {effective_fingerprint(setup)} (the same study from a file or flags)")

    if setup.profile_note:
        show(f"# {setup.profile_note}")
    for warning in startup_warnings(setup.profile):
        show(f"# {warning}", soft_wrap=True)
    previews = preview_commands(setup, samples=spec.dry_run_samples, seed=spec.seed, reference=plan.reference)
    _say_space(setup, reporter)
    checked = setup.checker() is not None
    formats = {n: q.format for n, q in setup.space.parameters.items() if q.format}
    for p in previews:
        _say_preview(p, formats, checked, reporter, memory_checked=setup.guard is not None)
    show("\n# dry run: nothing was launched and no study was written (the port is chosen at launch)")
    return _dry_run_exit(setup, plan, reporter)


def _say_space(setup: TuningSetup, reporter: Reporter) -> None:
    """What the dry run will tune: parameters the profile leaves out, the space, the prior, how a
    trial measures."""
    show = reporter.show
    for pname, reason in setup.space.unsupported.items():
        show(f"# not tuned with profile {setup.profile.name}: {pname}: {reason}")
    for line in setup.space_lines():
        show(f"# {line}", markup=False, soft_wrap=True)
    prior = setup.prior
    for line in prior.lines if prior is not None else ():
        show(f"# {line}", soft_wrap=True)
    measure = setup.capacity.describe() if setup.capacity is not None else setup.pass_plan.describe()
    show(f"# {measure}; pruning {'on' if setup.choices.prune else 'off'}")


def _say_preview(
    p: CommandPreview, formats: Mapping[str, str], checked: bool, reporter: Reporter, *, memory_checked: bool
) -> None:
    """One previewed command: its parameters, the parser's and the memory check's verdicts, the
    command line (and its KV transfer config)."""
    verdict = (
        f"REJECTED by vLLM's parser: {p.parser_error}"
        if p.parser_error
        else ("accepted by vLLM's parser" if checked else "not checked (--no-check-args)")
    )
    fit = "fits" if not p.fit_reasons else "does not fit: " + "; ".join(p.fit_reasons)
    show = reporter.show
    show(f"\n# {p.label}: {fmt_params(p.params, formats)}")
    show(f"# {verdict}; memory: {fit if memory_checked else 'not checked'}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
    show((env + " " if env else "") + " ".join(shlex.quote(a) for a in p.argv), soft_wrap=True)
    if p.transfer_config is not None:
        show("# --kv-transfer-config:\n" + json.dumps(p.transfer_config, indent=2), soft_wrap=True)


def _dry_run_exit(setup: TuningSetup, plan: BaselinePlan, reporter: Reporter) -> int:
    """0 when the study could run here (or the preview is for another host); else why not, and
    EXIT_NO_BASELINE unless a reference it may measure instead is accepted."""
    if plan.defaults_fit:
        return 0
    if (
        setup.profile_note
    ):  # a GPU profile previewed on a machine that cannot run it: the preview is the point
        reporter.say(
            f"this machine cannot run this study ({setup.profile_note}); the commands above are what a "
            f"{setup.profile.name} host would launch, checked against this machine's memory only",
            markup=False,
            soft_wrap=True,
        )
        return 0
    reporter.say(f"[yellow]vLLM's defaults cannot run here: {'; '.join(plan.why_not)}[/yellow]")
    reporter.say(f"the study would measure as its baseline: {plan.describe()}", markup=False, soft_wrap=True)
    if plan.reference is None:
        return EXIT_NO_BASELINE
    return 0 if setup.choices.accept_reference else EXIT_NO_BASELINE
