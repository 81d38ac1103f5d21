"""One night of a group study (several models on one server, ``autotune nightly -f group.yaml``).

As one engine's night (:mod:`autotune.nightly._night`), for the whole group:

1. Fingerprints of every model and workload, compared with the study's; what changed is named.
2. The incumbent is the deployed group: the group trial whose export is in ``out`` (the study records
   what it exported; a file changed since is an error), else the baseline group. Tonight's baseline
   group and the incumbent run alternately, ``rounds`` times: the baseline group is tonight's
   reference (1.0), and an incumbent worse than it beyond ``min_improvement`` in every round (two
   or more: one round measures no noise), or one that no longer runs, is a regression.
3. A search of new group trials (split and each model's space), held against tonight's baseline
   group, while the budget holds the promotion check.
4. Tonight's best group against the incumbent, A B A B; promoted only when the group objective
   beats the incumbent by more than the noise with no model worse beyond it. Promotion is all
   models or none: every file is written into a new folder first, the previous files are kept in
   the study's ``group-history``, then each is moved into ``out``.

Every group run is timed; the budget's clock is one engine's night's (``_Clock``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.nightly._plan import _Clock
from autotune.study import member_params
from autotune.tuning import (
    GROUP_FINGERPRINT_ATTR,
    GroupEvaluator,
    GroupSetup,
    GroupTrialReport,
    GroupTrialResult,
    baseline_group_trial,
    confirm_group,
    deployed_trial,
    export_group,
    group_fingerprint,
    record_deployed,
    run_group_study,
    stored_baseline,
)
from autotune.tuning._fingerprint import fingerprint_diffs

__all__ = ["GROUP_NIGHT_ATTR", "GroupNight", "GroupNightOptions", "group_nights", "run_group_night"]

log = logging.getLogger(__name__)

GROUP_NIGHT_ATTR = "group_night:"  # study attr prefix, one per night: group_night:0001
NIGHT_TRIAL_ATTR = "night"  # a search trial's night


@dataclass(frozen=True)
class GroupNightOptions:
    budget_s: float
    out: Path  # the deployed group's folder
    rounds: int = 2
    min_improvement: float = 0.03
    max_trials: int | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class GroupNight:
    """What one night did, as the study keeps it (``group_night:NNNN``)."""

    number: int
    started_at: str
    changes: tuple[str, ...]
    incumbent: str  # its label
    incumbent_trial: int | None
    incumbent_value: float | None  # the median of its rounds against tonight's baseline group (1.0)
    regression: bool
    trials: tuple[int, ...]  # tonight's search
    best: int | None
    decision: str  # promoted, kept, nothing_feasible
    reason: str
    export: str | None
    run_costs: tuple[float, ...]  # seconds per group run tonight
    duration_s: float

    def summary(self) -> str:
        head = f"Group night {self.number}: incumbent {self.incumbent}"
        head += (
            f" {self.incumbent_value:.3f} against tonight's baseline group" if self.incumbent_value else ""
        )
        alarm = "REGRESSION: " if self.regression else "No regression. "
        return f"{head}; {alarm}{self.reason} ({len(self.trials)} group trial(s), {self.duration_s / 60:.1f} min)"


def group_nights(study: optuna.Study) -> list[dict[str, Any]]:
    return [v for k, v in sorted(study.user_attrs.items()) if k.startswith(GROUP_NIGHT_ATTR)]


def _changes(study: optuna.Study, setup: GroupSetup) -> tuple[str, ...]:
    """What differs from the fingerprint the study recorded (then tonight's is recorded)."""
    mine = group_fingerprint(setup)
    recorded = study.user_attrs.get(GROUP_FINGERPRINT_ATTR)
    diffs = fingerprint_diffs(recorded, mine, "tonight") if recorded else []
    diffs += [f"{k}: new, {v['what']}" for k, v in mine.items() if recorded and k not in recorded]
    study.set_user_attr(GROUP_FINGERPRINT_ATTR, mine)
    return tuple(diffs)


@dataclass
class _Runs:
    """Tonight's group runs outside the study's trials (re-measure, confirmation), numbered apart."""

    evaluate: GroupEvaluator
    clock: _Clock
    say: Callable[[str], None]
    number: int = 0

    def __call__(
        self, label: str, split: Mapping[str, float], values: Mapping[str, Mapping[str, Any]],
        baseline: GroupTrialResult | None,
    ) -> GroupTrialResult:  # fmt: skip
        t0 = time.monotonic()
        res = self.evaluate(self.number, split, values, baseline)
        self.number += 1
        self.clock.run_costs.append(time.monotonic() - t0)
        figure = (
            f"group objective {res.score.value:.3f}"
            if res.score.value is not None
            else f"FAILED: {res.reason}"
        )
        self.say(f"  {label}: {figure}")
        return res


def _values(trial: optuna.trial.FrozenTrial, setup: GroupSetup) -> dict[str, dict[str, Any]]:
    return {m.name: member_params(trial.params, m.name) for m in setup.models}


def run_group_night(
    setup: GroupSetup,
    study: optuna.Study,
    sdir: Path,
    options: GroupNightOptions,
    *,
    check_args: bool = True,
    first: Mapping[str, float] | None = None,
    say: Callable[[str], None] = print,
    on_promote: Callable[[Path, Path | None, float, int], None] | None = None,
) -> GroupNight:
    """One night (the module's doc); ``first``: the prior's split (tried once per study);
    ``on_promote(out, previous, value, night)``: after the promoted files are in place."""
    number = len(group_nights(study)) + 1
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    earlier = [float(c) for n in group_nights(study)[-3:] for c in n.get("run_costs") or ()]
    clock = _Clock(options.budget_s, t0=options.started, prior_costs=earlier)
    changes = _changes(study, setup)
    for line in changes:
        say(f"night {number}: changed since the study's last run: {line}")
    night_dir = sdir / f"group-night-{number:04d}"
    runs = _Runs(
        GroupEvaluator(setup, night_dir, check_args=check_args, cache_root=sdir / "logs"), clock, say
    )
    search = GroupEvaluator(setup, sdir / "logs", check_args=check_args)

    def record(**kw: Any) -> GroupNight:
        night = GroupNight(
            number=number, started_at=started_at, changes=changes,
            run_costs=tuple(round(c, 1) for c in clock.run_costs), duration_s=clock.elapsed(), **kw,
        )  # fmt: skip
        study.set_user_attr(f"{GROUP_NIGHT_ATTR}{number:04d}", dataclasses.asdict(night))
        return night

    # 1. the baseline group, measured once for the study (its first trial) and then tonight
    if baseline_group_trial(study) is None:
        say(f"night {number}: the study has no baseline group yet: measuring it as trial 0")
        run_group_study(setup, search, study, n_trials=1, attrs={NIGHT_TRIAL_ATTR: number})
    base_trial = baseline_group_trial(study)
    if stored_baseline(study, setup) is None or base_trial is None:
        return record(
            incumbent="baseline group", incumbent_trial=None, incumbent_value=None, regression=True,
            trials=(), best=None, decision="nothing_feasible", export=None,
            reason="the baseline group did not run: nothing to measure against",
        )  # fmt: skip
    inc = deployed_trial(study, options.out) or base_trial
    one_arm = inc.number == base_trial.number
    label = "baseline group" if one_arm else f"deployed group (trial {inc.number})"
    say(f"night {number}: re-measuring {'the baseline group' if one_arm else 'the baseline group and the ' + label}, "
        f"{options.rounds} round(s)")  # fmt: skip
    base_split = dict(base_trial.user_attrs["split"])
    bases: list[GroupTrialResult] = []
    inc_values: list[float] = []
    inc_failed = ""
    for r in range(options.rounds):
        base = runs(f"round {r + 1}: baseline group", base_split, {}, None)
        bases.append(base)
        if one_arm or not base.measured:
            continue
        got = runs(f"round {r + 1}: {label}", dict(inc.user_attrs["split"]), _values(inc, setup), base)
        if got.score.value is not None:
            inc_values.append(got.score.value)
        elif not inc_failed:
            inc_failed = got.reason or "failed"
    tonight = next((b for b in bases if b.measured), None)
    if tonight is None:
        return record(
            incumbent=label, incumbent_trial=inc.number, incumbent_value=None, regression=True, trials=(),
            best=None, decision="nothing_feasible", export=None,
            reason=f"tonight's baseline group did not run ({bases[-1].reason}): nothing to measure against",
        )  # fmt: skip
    inc_value = 1.0 if one_arm else (statistics.median(inc_values) if inc_values else None)
    # worse than tonight's baseline group beyond the floor in every round (two or more: one round
    # measures no noise, and on a busy host a model's p50 of tens of ms moves 2x run to run), or no
    # longer running
    worse = len(inc_values) >= 2 and min(inc_values) > 1 + options.min_improvement
    regression = bool(inc_failed and not inc_values) or worse
    if regression:
        why = (
            f"no longer runs ({inc_failed})"
            if not worse
            else f"scored {', '.join(f'{v:.3f}' for v in inc_values)} against tonight's baseline group, worse "
            f"beyond the {options.min_improvement:.0%} floor in every round"
        )
        say(f"night {number}: REGRESSION: the {label} {why}")
    elif len(inc_values) == 1 and inc_values[0] > 1 + options.min_improvement:
        say(
            f"night {number}: the {label} scored {inc_values[0]:.3f} against tonight's baseline group in its one "
            "round: one round measures no noise, so no regression is called (fix: --rounds 2)"
        )

    # 2. the search, held against tonight's baseline group
    reserve = 2 * options.rounds  # the promotion check's runs

    def should_stop() -> bool:
        return not clock.can_start(1, reserve)

    def on_done(rep: GroupTrialReport) -> None:
        if not (rep.reason or "").startswith("infeasible before launch"):  # one that started engines
            clock.run_costs.append(max(time.monotonic() - last[0], 0.0))
        last[0] = time.monotonic()
        value = f"group objective {rep.value:.3f}" if rep.value is not None else f"FAILED: {rep.reason}"
        say(f"  trial {rep.number} ({rep.label}): {setup.describe_split(rep.split)}: {value}")

    last = [time.monotonic()]
    before = {t.number for t in study.get_trials(deepcopy=False)}
    limit = options.max_trials if options.max_trials is not None else 10_000
    if limit > 0 and not should_stop():
        say(f"night {number}: searching ({clock.per_run() / 60:.1f} min a group run)")
        run_group_study(
            setup, search, study, n_trials=limit, first=first, on_done=on_done, baseline=tonight,
            attrs={NIGHT_TRIAL_ATTR: number}, should_stop=should_stop,
        )  # fmt: skip
    mine = [t for t in study.get_trials(deepcopy=False) if t.number not in before]
    measured = [t for t in mine if t.value is not None]
    best = min(measured, key=lambda t: float(t.value or 0.0), default=None)
    common = {"incumbent": label, "incumbent_trial": inc.number, "incumbent_value": inc_value,
              "regression": regression, "trials": tuple(t.number for t in mine)}  # fmt: skip
    if best is None:
        why = "no group trial ran tonight" if not mine else "no group trial of tonight was feasible"
        return record(**common, best=None, decision="kept", export=None, reason=f"kept the {label}: {why}")
    target = inc_value if inc_value is not None else float("inf")
    if best.value is None or best.value >= target:
        return record(
            **common, best=best.number, decision="kept", export=None,
            reason=f"kept the {label}: tonight's best, trial {best.number} ({best.value:.3f}), is not ahead of it",
        )  # fmt: skip

    # 3. tonight's best against the incumbent, then all models or none
    if not clock.can_start(2 * options.rounds):
        return record(
            **common, best=best.number, decision="kept", export=None,
            reason=f"kept the {label}: no time left in the budget to re-measure trial {best.number} against it",
        )  # fmt: skip
    say(f"night {number}: trial {best.number} against the {label}, {options.rounds} round(s) each")
    done = confirm_group(
        setup, runs.evaluate, inc, best, rounds=options.rounds, min_improvement=options.min_improvement,
        first_number=10_000 + runs.number, base_label=label,
        on_run=lambda arm, r, res: say(f"  confirm round {r + 1}: {arm}: " + (
            f"group objective {res.score.value:.3f}" if res.score.value is not None else f"FAILED: {res.reason}")),
    )  # fmt: skip
    if not done.confirmed:
        return record(
            **common, best=best.number, decision="kept", export=None,
            reason=f"kept the {label}: trial {best.number} against it: {done.why}",
        )  # fmt: skip
    header = [f"study {study.study_name!r}, group night {number}, group trial {best.number}: {done.why}"]
    staged = night_dir / "export"
    written = export_group(setup, runs.evaluate, best, staged, header)
    previous = _swap_in(written.launch.parent, options.out, sdir / "group-history" / f"night-{number:04d}")
    final = dataclasses.replace(
        written,
        configs={n: options.out / p.name for n, p in written.configs.items()},
        launch=options.out / written.launch.name,
    )
    record_deployed(study, best, final)
    night = record(
        **common, best=best.number, decision="promoted", export=str(options.out),
        reason=f"promoted trial {best.number}: {done.why}",
    )  # fmt: skip
    if on_promote is not None:
        on_promote(options.out, previous, float(done.value or 0.0), number)
    return night


def _swap_in(staged: Path, out: Path, history: Path) -> Path | None:
    """Move every staged file into ``out``; the files they replace first go to ``history``
    (returned; None when ``out`` held none). Every file was written and checked before this."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in staged.iterdir() if p.is_file())
    kept = [out / n for n in names if (out / n).exists()]
    if kept:
        history.mkdir(parents=True, exist_ok=True)
        for path in kept:
            shutil.copy2(path, history / path.name)
    for n in names:
        shutil.copy2(staged / n, out / f".{n}.new")
    for n in names:
        (out / f".{n}.new").replace(out / n)
    return history if kept else None
