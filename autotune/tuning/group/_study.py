"""A group study's trials, run by the one study loop (:class:`~autotune.study.StudyRunner`, as one
engine's are) with the group's measure (:class:`GroupMeasure`): the baseline group first
(``share.baseline``, or an equal split, each model's fixed flags), then the prior's split (when it
has one), then sampled splits and configurations (``split.NAME`` and ``NAME.param``), each one group
trial.

A trial's value is the group's objective (``group_objective:``; the baseline group scores 1.0); each
model's figures, command, log and reason are its user attrs (``model:NAME``). A split that cannot run
is failed before launch with each model's reason; a failed or infeasible group trial (a model that
broke its SLO, or under ``pareto`` one worse than its baseline beyond the noise floor, named with its
figure in ``group_reason``) is data, kept as Optuna keeps a trial without a value: PRUNED, its
``group_feasible`` constraint violated (the sampler learns the infeasible region from it), its
ratios and reason kept.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.errors import AutotuneError, ConfigError
from autotune.study import (
    BASELINE_ATTR,
    GROUP_FINGERPRINT_ATTR,
    Figures,
    GroupScore,
    StudyRunner,
    TrialHooks,
    TrialRecord,
    TrialStatus,
    split_params,
    store_constraints,
    suggest_member,
    suggest_split,
)
from autotune.tuning._fingerprint import fingerprint_diffs, study_fingerprint
from autotune.tuning.group._setup import GroupSetup
from autotune.tuning.group._trial import GroupEvaluator, GroupTrialResult

__all__ = [
    "GROUP_FINGERPRINT_ATTR",
    "GroupMeasure",
    "GroupTrialReport",
    "check_group_fingerprint",
    "group_fingerprint",
    "run_group_study",
    "stored_baseline",
]

OBJECTIVE_PART = "group_objective"  # its part naming the group objective (absent: made before the key)
LEGACY_MODE = "worst"  # the group objective of a study made before group_objective: existed

log = logging.getLogger(__name__)

KEPT_FIGURES = ("ttft_p90", "ttft_p50", "tpot_p90", "e2el_p90", "output_throughput", "completed", "failed")
CAPACITY_FIGURES = (
    "capacity", "capacity_x", "capacity_hi", "capacity_hi_x", "capacity_base_rps", "capacity_slos",
    "capacity_levels", "capacity_note",
)  # fmt: skip


@dataclass(frozen=True)
class GroupTrialReport:
    """One trial of the group study, as the command line shows it."""

    number: int
    label: str  # baseline, prior's split, sampled
    split: Mapping[str, float]
    value: float | None  # the group's objective (None: failed or infeasible)
    ratios: Mapping[str, float]
    reason: str | None
    # the models whose replay saturated their engine (its requests queued behind the arrivals): the note
    saturated: Mapping[str, str] = field(default_factory=dict)
    capacity: str | None = None  # a capacity trial: the load the group held, in words (group_capacity)


def group_capacity(records: Mapping[str, TrialRecord]) -> str | None:
    """A capacity trial's group figure in words: the multiplier of every model's traffic the group
    held at once, and each model's rate there (None: not a capacity trial)."""
    raws = {n: r.figures.raw for n, r in records.items() if r.figures is not None}
    if not raws or any(raw.get("capacity_levels") is None for raw in raws.values()):
        return None
    x = next(iter(raws.values())).get("capacity_x")
    if x is None:
        return "the group held no level: a model broke its SLO even at the lowest load"
    rates = ", ".join(f"{n} {float(raw.get('capacity') or 0.0):.3g} req/s" for n, raw in raws.items())
    return f"the group holds {float(x):.3g}x every model's traffic at once ({rates})"


def _model_attrs(rec: TrialRecord, metric: str) -> dict[str, Any]:
    figures = {k: rec.figures.get(k) for k in (metric, *KEPT_FIGURES)} if rec.figures is not None else {}
    if rec.figures is not None and rec.figures.get(CAPACITY_FIGURES[0]) is not None:
        # a capacity trial: its bracket (multipliers, levels, what broke), as one engine's record keeps it
        figures.update({k: rec.figures.raw.get(k) for k in CAPACITY_FIGURES})
    return {
        "status": str(rec.status),
        "metric": metric,  # the model's objective metric: its ratio is this figure's
        "figures": figures,
        "failure": rec.failure,
        "reason": rec.reason,
        "command": list(rec.command),
        "log_path": rec.log_path,
        "saturated": rec.saturated,
    }


def group_fingerprint(setup: GroupSetup) -> dict[str, dict[str, str]]:
    """What a group study measures, hashed: each model's space, workload, model and tuned parameters
    (as one engine's study hashes them) and its weight, the budget with the baseline's split, and the
    group objective (its trials' values are that objective's)."""
    out: dict[str, dict[str, str]] = {}
    for m in setup.models:
        for key, value in study_fingerprint(m.setup).items():
            out[f"{m.name}.{key}"] = value
        out[f"{m.name}.weight"] = {"sha": f"{m.weight:g}", "what": f"weight {m.weight:g}"}
    base = ", ".join(f"{n} {setup.baseline[n]:.3f}" for n in setup.names)
    what = f"{setup.budget.total_text()}, baseline {base} ({setup.baseline_source})"
    out["share"] = {"sha": hashlib.sha256(what.encode()).hexdigest()[:16], "what": what}
    out[OBJECTIVE_PART] = _objective_part(setup.file.objective)
    return out


def _objective_part(mode: str) -> dict[str, str]:
    return {"sha": mode, "what": f"group_objective {mode}"}


def check_group_fingerprint(study: optuna.Study, setup: GroupSetup) -> None:
    """Refuse to resume a group study made for other models, workloads, spaces, weights, budget or
    group objective: its baseline group and trials would be held against figures of something else,
    or its values compared with values of another objective. A study that records none yet gets this
    group's. A study made before ``group_objective:`` existed scored its trials by ``worst``: it opens
    under ``group_objective: worst`` (its fingerprint then records it) and is refused under another."""
    mine = group_fingerprint(setup)
    recorded = study.user_attrs.get(GROUP_FINGERPRINT_ATTR)
    if not recorded:
        study.set_user_attr(GROUP_FINGERPRINT_ATTR, mine)
        return
    recorded = {OBJECTIVE_PART: _objective_part(LEGACY_MODE), **recorded}
    diffs = fingerprint_diffs(recorded, mine, "this run") + [
        f"{key}: the study has no such part, this run {value['what']}"
        for key, value in mine.items()
        if key not in recorded
    ]
    if diffs:
        mode = recorded[OBJECTIVE_PART].get("sha")
        keep = f", with group_objective: {mode}" if mode != mine[OBJECTIVE_PART]["sha"] else ""
        raise ConfigError(
            f"study {study.study_name!r} measures another group: {'; '.join(diffs)} "
            f"(fix: the study's group file as it was{keep}, or a new --study name)"
        )
    if study.user_attrs[GROUP_FINGERPRINT_ATTR] != recorded:
        study.set_user_attr(GROUP_FINGERPRINT_ATTR, recorded)


def stored_baseline(study: optuna.Study, setup: GroupSetup) -> GroupTrialResult | None:
    """The baseline group an earlier run of ``study`` measured (every model's figures), as the
    later trials read it; None when it has none."""
    for t in study.get_trials(deepcopy=False):
        attrs = [t.user_attrs.get(f"model:{n}") or {} for n in setup.names]
        if t.user_attrs.get("group_trial") == "baseline" and all(a.get("status") == "ok" for a in attrs):
            records = {
                n: TrialRecord(status=TrialStatus.OK, figures=Figures(dict(a.get("figures") or {})))
                for n, a in zip(setup.names, attrs, strict=True)
            }
            score = GroupScore(t.value, dict(t.user_attrs.get("group_ratios") or {}), ())
            return GroupTrialResult(records, score, None, t.user_attrs.get("group_reason"))
    return None


def _kinds(
    study: optuna.Study, baseline: GroupTrialResult | None, first: Mapping[str, float] | None
) -> list[str]:
    """What the first trials of a run are: the baseline group and the prior's split unless the study
    has measured them; sampled ones follow."""
    prior_done = any(t.user_attrs.get("group_trial") == "prior" for t in study.get_trials(deepcopy=False))
    return [
        *([] if baseline is not None else ["baseline"]),
        *(["prior"] if first is not None and not prior_done else []),
    ]


@dataclass
class GroupMeasure:
    """How each trial of a group study is measured (the runner's :class:`~autotune.study.Measure`):
    the split and each model's values chosen for its kind (the baseline group, the prior's split,
    sampled), a split that cannot run PRUNED before launch with ``group_feasible`` violated, else
    the whole group measured by ``evaluate`` and held against ``baseline``; after each trial
    ``on_done`` hears its report, and the baseline group failing stops the study."""

    setup: GroupSetup
    evaluate: GroupEvaluator
    first: Mapping[str, float] | None = None
    baseline: GroupTrialResult | None = None
    on_done: Callable[[GroupTrialReport], None] | None = None
    journal: None = None  # a group trial is stored as it ends
    pruner: None = None
    _kinds: list[str] = field(default_factory=list, init=False, repr=False)
    _kind: str = field(default="sampled", init=False, repr=False)
    _chosen: tuple[dict[str, float], dict[str, dict[str, Any]]] = field(
        default=({}, {}), init=False, repr=False
    )
    _last: tuple[GroupTrialReport, GroupTrialResult | None] | None = field(
        default=None, init=False, repr=False
    )

    def begin(self, study: optuna.Study, *, running_counts: bool) -> None:
        self._kinds = _kinds(study, self.baseline, self.first)

    def before_ask(self, study: optuna.Study) -> None:
        """The baseline group's split or the prior's, enqueued for the next ask."""
        self._kind = self._kinds.pop(0) if self._kinds else "sampled"
        if self._kind != "sampled":
            split = self.setup.baseline if self._kind == "baseline" else (self.first or self.setup.baseline)
            study.enqueue_trial(split_params(split, self.setup.names), skip_if_exists=False)

    def values(self, trial: optuna.Trial) -> dict[str, Any]:
        names = self.setup.names
        split = suggest_split(trial, names)
        members = (
            {}  # each model's fixed flags only
            if self._kind != "sampled"
            else {m.name: suggest_member(trial, m.name, m.setup.space) for m in self.setup.models}
        )
        for key, attr in {"group_trial": self._kind, "split": dict(split)}.items():
            trial.set_user_attr(key, attr)
        if self._kind == "baseline":
            trial.set_user_attr(BASELINE_ATTR, True)
        self._chosen = (split, members)
        return {
            **split_params(split, names),
            **{f"{n}.{k}": v for n, vs in members.items() for k, v in vs.items()},
        }

    def __call__(self, trial: optuna.Trial, values: Mapping[str, Any]) -> float | None:
        """The group trial told its outcome: its value, or None (PRUNED, ``group_feasible`` violated)."""
        (split, members), kind = self._chosen, self._kind
        infeasible = self.setup.infeasible(split, members)
        if infeasible:
            reason = "infeasible before launch: " + "; ".join(infeasible)
            trial.set_user_attr("group_reason", reason)
            store_constraints(trial, ["group_feasible"], [1.0])
            self._last = GroupTrialReport(trial.number, kind, dict(split), None, {}, reason), None
            return None
        result = self.evaluate(trial.number, split, members, self.baseline)
        value = _record(trial, self.setup, result)
        saturated = {
            n: r.figures.saturation_note for n, r in result.records.items() if r.saturated and r.figures
        }
        report = GroupTrialReport(
            trial.number, kind, dict(split), value, dict(result.score.ratios), result.reason, saturated,
            group_capacity(result.records),
        )  # fmt: skip
        self._last = report, result
        return value

    def after_trial(self, study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
        """The trial's report to ``on_done``; the baseline group just measured checked."""
        if self._last is None:
            return
        (report, result), self._last = self._last, None
        if report.label == "baseline":
            self.baseline = result
        if self.on_done is not None:
            self.on_done(report)
        if report.label == "baseline":
            _check_baseline(self.baseline, report.reason)


def _record(trial: optuna.Trial, setup: GroupSetup, result: GroupTrialResult) -> float | None:
    for m in setup.models:
        trial.set_user_attr(f"model:{m.name}", _model_attrs(result.records[m.name], m.setup.objective.metric))
    trial.set_user_attr("group_ratios", dict(result.score.ratios))
    if result.reason is not None:
        trial.set_user_attr("group_reason", result.reason)
    feasible = result.ok and result.score.value is not None
    store_constraints(trial, ["group_feasible"], [0.0 if feasible else 1.0])
    return result.score.value if feasible else None  # None: told PRUNED, no value, never a sentinel


def _check_baseline(baseline: GroupTrialResult | None, reason: str | None) -> None:
    """The baseline group just measured: one that missed stays the reference (said); one that failed
    stops the study (nothing to compare with)."""
    if baseline is not None and baseline.measured and not baseline.ok:
        log.warning("the baseline group is measured but misses: %s; it stays the reference", reason)
    if baseline is None or not baseline.measured:
        raise AutotuneError(
            f"the baseline group failed: {reason} (fix: give each model a share that holds it in "
            "share.baseline, or a larger share total)"
        )


def run_group_study(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    study: optuna.Study,
    *,
    n_trials: int,
    first: Mapping[str, float] | None = None,
    on_done: Callable[[GroupTrialReport], None] | None = None,
    baseline: GroupTrialResult | None = None,
    attrs: Mapping[str, Any] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> optuna.Study:
    """``n_trials`` more group trials into ``study`` (minimised) by the one study runner: the baseline
    group, the prior's split, then sampled ones; a resumed study keeps the baseline group and the
    prior's split it has measured (every later trial is held against that baseline). The baseline
    group failing stops the study (nothing to compare with). ``baseline``: the baseline group measured
    elsewhere (a night's, on tonight's traffic), held against instead of the study's; ``attrs``: set on
    every trial; ``should_stop``: asked before each trial (a night's budget)."""
    if n_trials <= 0 or (should_stop is not None and should_stop()):
        return study
    measure = GroupMeasure(setup, evaluate, first, baseline or stored_baseline(study, setup), on_done)
    hooks = TrialHooks(should_stop=should_stop)
    runner = StudyRunner(study, measure, hooks, dict(attrs or {}), after_trial=measure.after_trial)
    return runner.run(n_trials)
