"""A group's night steps (several models on one server, ``autotune nightly -f group.yaml``).

The night is one pipeline (:func:`autotune.nightly._night.run_night`) with one record, one set of
options, one clock and one plan's reserve table for N >= 1 engines; what is the group's alone is
here: tonight's figures are the group objective against tonight's baseline group (1.0), a trial is
a split of the shared budget with each model's values, and a promotion writes every model's file
and the launch file.

1. Fingerprints of every model and workload, compared with the study's; what changed is named.
2. The incumbent is the deployed group: the group trial whose export is in ``out`` (the study records
   what it exported; a file changed since is an error), else the baseline group. Tonight's baseline
   group and the incumbent run alternately, the plan's rounds: the baseline group is tonight's
   reference (1.0), and an incumbent worse than it beyond ``min_improvement`` in every round (two
   or more: one round measures no noise), or one that no longer runs, is a regression.
3. A search of new group trials (split and each model's space), held against tonight's baseline
   group, while the budget holds the promotion check.
4. Tonight's best group against the incumbent, A B A B; promoted only when the group objective
   beats the incumbent by more than the noise with no model worse beyond it. Promotion is all
   models or none: every file is written into a new folder first, the previous files are kept in
   the study's ``group-history``, then each is moved into ``out``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.nightly._history import NightRecord, last_night, nights
from autotune.nightly._night import NightDecision, NightSteps
from autotune.nightly._plan import _Clock, open_clock
from autotune.nightly._tonight import NightOptions, NightState
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

__all__ = ["group_night"]

NIGHT_TRIAL_ATTR = "night"  # a search trial's night
BASELINE = "baseline group"


def _changes(study: optuna.Study, setup: GroupSetup) -> list[str]:
    """What differs from the fingerprint the study recorded (then tonight's is recorded)."""
    mine = group_fingerprint(setup)
    recorded = study.user_attrs.get(GROUP_FINGERPRINT_ATTR)
    diffs = fingerprint_diffs(recorded, mine, "tonight") if recorded else []
    diffs += [f"{k}: new, {v['what']}" for k, v in mine.items() if recorded and k not in recorded]
    study.set_user_attr(GROUP_FINGERPRINT_ATTR, mine)
    return list(diffs)


def _shown(res: GroupTrialResult) -> str:
    return (
        f"group objective {res.score.value:.3f}" if res.score.value is not None else f"FAILED: {res.reason}"
    )


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
        self.say(f"  {label}: {_shown(res)}")
        return res


def _values(trial: optuna.trial.FrozenTrial, setup: GroupSetup) -> dict[str, dict[str, Any]]:
    return {m.name: member_params(trial.params, m.name) for m in setup.models}


@dataclass
class _GroupNight(NightState):
    """A group's night: tonight's state, as the steps fill it in."""

    setup: GroupSetup
    started_at: str
    deployed: optuna.trial.FrozenTrial | None
    label: str
    runs: _Runs
    search_eval: GroupEvaluator
    first: Mapping[str, float] | None
    stop: str = ""  # why nothing could be measured (the baseline group did not run)
    inc: optuna.trial.FrozenTrial | None = None
    tonight: GroupTrialResult | None = None
    inc_values: list[float] = field(default_factory=list)
    inc_failed: str = ""
    mine: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    group: dict[str, Any] = field(default_factory=dict)  # the record's group facts

    @property
    def one_arm(self) -> bool:
        return self.label == BASELINE

    @property
    def inc_value(self) -> float | None:
        if self.one_arm:
            return 1.0
        return statistics.median(self.inc_values) if self.inc_values else None

    def remeasure(self) -> None:
        """The study's baseline group once (its first trial), then tonight's rounds of the baseline
        group and the incumbent, alternately."""
        if baseline_group_trial(self.study) is None:
            self.say(f"night {self.number}: the study has no baseline group yet: measuring it as trial 0")
            run_group_study(
                self.setup, self.search_eval, self.study, n_trials=1, attrs={NIGHT_TRIAL_ATTR: self.number}
            )
        base_trial = baseline_group_trial(self.study)
        if stored_baseline(self.study, self.setup) is None or base_trial is None:
            self.stop = "the baseline group did not run: nothing to measure against"
            return
        self.inc = self.deployed or base_trial
        arms = "the baseline group" if self.one_arm else f"the baseline group and the {self.label}"
        self.say(f"night {self.number}: re-measuring {arms}, {self.plan.rounds} round(s)")
        bases = [self._round(r, base_trial, self.inc) for r in range(self.plan.rounds)]
        self.tonight = next((b for b in bases if b.measured), None)
        if self.tonight is None:
            self.stop = (
                f"tonight's baseline group did not run ({bases[-1].reason}): nothing to measure against"
            )

    def _round(
        self, r: int, base_trial: optuna.trial.FrozenTrial, inc: optuna.trial.FrozenTrial
    ) -> GroupTrialResult:
        base = self.runs(f"round {r + 1}: {BASELINE}", dict(base_trial.user_attrs["split"]), {}, None)
        if self.one_arm or not base.measured:
            return base
        got = self.runs(
            f"round {r + 1}: {self.label}", dict(inc.user_attrs["split"]), _values(inc, self.setup), base
        )
        if got.score.value is not None:
            self.inc_values.append(got.score.value)
        elif got.measured and not got.score.broken and got.score.ratios:
            # measured, and infeasible only because a model is worse than tonight's baseline (pareto):
            # its worst model's ratio is what the every-round rule holds against the floor
            self.inc_values.append(max(got.score.ratios.values()))
        elif not self.inc_failed:
            self.inc_failed = got.reason or "failed"
        return base

    def verdict(self) -> tuple[bool, str]:
        """Worse than tonight's baseline group beyond the floor in every round (two or more: one round
        measures no noise, and on a busy host a model's p50 of tens of ms moves 2x run to run), or
        no longer running."""
        if self.stop:
            return True, self.stop
        floor = self.options.min_improvement
        worse = len(self.inc_values) >= 2 and min(self.inc_values) > 1 + floor
        if self.inc_failed and not self.inc_values:
            why = f"no longer runs ({self.inc_failed})"
        elif worse:
            scored = ", ".join(f"{v:.3f}" for v in self.inc_values)
            why = f"scored {scored} against tonight's baseline group, worse beyond the {floor:.0%} floor in every round"
        else:
            if len(self.inc_values) == 1 and self.inc_values[0] > 1 + floor:
                self.say(
                    f"night {self.number}: the {self.label} scored {self.inc_values[0]:.3f} against tonight's "
                    "baseline group in its one round: one round measures no noise, so no regression is called "
                    "(fix: --rounds 2)"
                )
            return False, ""
        self.say(f"night {self.number}: REGRESSION: the {self.label} {why}")
        return True, why

    def search(self) -> str:
        """New group trials, held against tonight's baseline group, while the budget holds the
        promotion check (the plan's reserve)."""
        if self.stop:
            return self.stop
        last = [time.monotonic()]

        def should_stop() -> bool:
            return not self.room_to_search()

        def on_done(rep: GroupTrialReport) -> None:
            if not (rep.reason or "").startswith("infeasible before launch"):  # one that started engines
                self.clock.run_costs.append(max(time.monotonic() - last[0], 0.0))
            last[0] = time.monotonic()
            value = f"group objective {rep.value:.3f}" if rep.value is not None else f"FAILED: {rep.reason}"
            self.say(f"  trial {rep.number} ({rep.label}): {self.setup.describe_split(rep.split)}: {value}")

        before = {t.number for t in self.study.get_trials(deepcopy=False)}
        limit = self.options.max_trials if self.options.max_trials is not None else 10_000
        why = "--max-trials 0 turned the search off" if limit <= 0 else ""
        if not why and should_stop():
            why = f"no room in the budget for one group run ({self.clock.per_run() / 60:.1f} min) and the promotion check"
        if not why:
            self.say(f"night {self.number}: searching ({self.clock.per_run() / 60:.1f} min a group run)")
            run_group_study(
                self.setup, self.search_eval, self.study, n_trials=limit, first=self.first, on_done=on_done,
                baseline=self.tonight, attrs={NIGHT_TRIAL_ATTR: self.number}, should_stop=should_stop,
            )  # fmt: skip
        self.mine = [t for t in self.study.get_trials(deepcopy=False) if t.number not in before]
        return why

    def decide(self, why_none: str) -> NightDecision:
        """Tonight's best group against the incumbent, then all models or none."""
        if self.stop:
            return NightDecision("nothing_feasible", self.stop)
        measured = [t for t in self.mine if t.value is not None]
        best = min(measured, key=lambda t: float(t.value or 0.0), default=None)
        if best is None:
            why = "no group trial ran tonight" if not self.mine else "no group trial of tonight was feasible"
            return NightDecision("kept", f"kept the {self.label}: {why}")
        self.group["best"] = best.number
        value = self.inc_value
        if best.value is None or best.value >= (value if value is not None else float("inf")):
            return NightDecision(
                "kept",
                f"kept the {self.label}: tonight's best, trial {best.number} ({best.value:.3f}), is not ahead of it",
            )
        if not self.room_to_confirm():
            return NightDecision(
                "kept",
                f"kept the {self.label}: no time left in the budget to re-measure trial {best.number} against it",
            )
        return self._confirm(best)

    def _confirm(self, best: optuna.trial.FrozenTrial) -> NightDecision:
        assert self.inc is not None
        rounds = self.confirm_rounds()
        self.say(f"night {self.number}: trial {best.number} against the {self.label}, {rounds} round(s) each")
        done = confirm_group(
            self.setup, self.runs.evaluate, self.inc, best, rounds=rounds,
            min_improvement=self.options.min_improvement, first_number=10_000 + self.runs.number,
            base_label=self.label,
            on_run=lambda arm, r, res: self.say(f"  confirm round {r + 1}: {arm}: {_shown(res)}"),
        )  # fmt: skip
        if not done.confirmed:
            return NightDecision("kept", f"kept the {self.label}: trial {best.number} against it: {done.why}")
        self._promote(best, done.why)
        self.group["promoted_value"] = float(done.value or 0.0)
        return NightDecision("promoted", f"promoted trial {best.number}: {done.why}", best.number)

    def _promote(self, best: optuna.trial.FrozenTrial, why: str) -> None:
        """Every file staged, the replaced ones kept in group-history, then each moved into ``out``."""
        out = self.options.out
        header = [
            f"study {self.study.study_name!r}, group night {self.number}, group trial {best.number}: {why}"
        ]
        staged = self.sdir / f"group-night-{self.number:04d}" / "export"
        written = export_group(self.setup, self.runs.evaluate, best, staged, header)
        history = self.sdir / "group-history" / f"night-{self.number:04d}"
        previous = _swap_in(written.launch.parent, out, history)
        final = dataclasses.replace(
            written,
            configs={n: out / p.name for n, p in written.configs.items()},
            launch=out / written.launch.name,
        )
        record_deployed(self.study, best, final)
        self.group["previous"] = str(previous) if previous is not None else None

    def record(self, verdict: tuple[bool, str], decision: NightDecision, why_none: str) -> NightRecord:
        value = None if self.stop else self.inc_value
        figure = (
            None if value is None else {"median": value, "low": value, "high": value, "runs": self.inc_values}
        )
        return NightRecord(
            number=self.number, date=self.started_at, fingerprints={}, changes=self.changes,
            metric="group_objective", baseline_figure=None, incumbent_label=self.label, incumbent_args=None,
            incumbent_env={}, incumbent_params=None, incumbent_figure=figure, noise_band=None,
            regression=verdict[0], regression_reason=verdict[1], decision=decision.decision, reason=decision.reason,
            promoted_trial=decision.promoted, trials=len(self.mine), duration_s=self.clock.elapsed(),
            budget_s=self.options.budget_s, export=str(self.options.out) if decision.promoted is not None else None,
            plan=self.plan.as_dict(), run_costs=[round(c, 1) for c in self.clock.run_costs],
            group={"incumbent_trial": None if self.inc is None else self.inc.number, "incumbent_value": value,
                   "best": None, "trial_numbers": [t.number for t in self.mine], "previous": None,
                   "promoted_value": None, **self.group},
        )  # fmt: skip


def group_night(
    setup: GroupSetup,
    study: optuna.Study,
    sdir: Path,
    options: NightOptions,
    *,
    check_args: bool = True,
    first: Mapping[str, float] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> NightSteps:
    """A group's night (the module's doc): the plan printed first, then what changed; a deployed
    file changed by hand is refused here, before any engine starts. ``first``: the prior's split
    (tried once per study)."""
    previous = last_night(study)
    number = (previous.number + 1) if previous else 1
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    deployed = deployed_trial(study, options.out)
    base = baseline_group_trial(study)
    label = (
        BASELINE
        if deployed is None or (base and deployed.number == base.number)
        else f"deployed group (trial {deployed.number})"
    )
    costs = [c for n in nights(study)[-3:] for c in n.run_costs]
    clock, plan = open_clock(
        options.budget_s, options.started, costs, arms=(BASELINE,) if label == BASELINE else (BASELINE, label),
        rounds=options.rounds, search=options.max_trials != 0, say=say,
    )  # fmt: skip
    changes = _changes(study, setup)
    for line in changes:
        say(f"night {number}: changed since the study's last run: {line}")
    night_dir = sdir / f"group-night-{number:04d}"
    return _GroupNight(
        setup=setup, study=study, sdir=sdir, options=options, say=say, number=number, started_at=started_at,
        clock=clock, plan=plan, changes=changes, deployed=deployed, label=label,
        runs=_Runs(GroupEvaluator(setup, night_dir, check_args=check_args, cache_root=sdir / "logs"), clock, say),
        search_eval=GroupEvaluator(setup, sdir / "logs", check_args=check_args), first=first,
    )  # fmt: skip


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
