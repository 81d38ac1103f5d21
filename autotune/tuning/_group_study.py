"""The Optuna loop of a group of models on one server: the baseline group first (``share.baseline``,
or an equal split, each model's fixed flags), then the prior's split (when it has one), then
sampled splits and configurations (``split.NAME`` and ``NAME.param``), each one group trial.

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
    GROUP_FINGERPRINT_ATTR,
    Figures,
    GroupScore,
    TrialRecord,
    TrialStatus,
    split_params,
    store_constraints,
    suggest_member,
    suggest_split,
)
from autotune.tuning._fingerprint import fingerprint_diffs, study_fingerprint
from autotune.tuning._group import GroupSetup
from autotune.tuning._group_trial import GroupEvaluator, GroupTrialResult

__all__ = [
    "GROUP_FINGERPRINT_ATTR",
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


def _model_attrs(rec: TrialRecord, metric: str) -> dict[str, Any]:
    figures = {k: rec.figures.get(k) for k in (metric, *KEPT_FIGURES)} if rec.figures is not None else {}
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


def _ask(
    study: optuna.Study, setup: GroupSetup, kind: str, first: Mapping[str, float] | None
) -> tuple[optuna.Trial, dict[str, float], dict[str, dict[str, Any]]]:
    names = setup.names
    if kind in ("baseline", "prior"):
        split = setup.baseline if kind == "baseline" else (first or setup.baseline)
        study.enqueue_trial(split_params(split, names), skip_if_exists=False)
        trial = study.ask()
        return trial, suggest_split(trial, names), {}  # each model's fixed flags only
    trial = study.ask()
    split = suggest_split(trial, names)
    return trial, split, {m.name: suggest_member(trial, m.name, m.setup.space) for m in setup.models}


def _tell(
    study: optuna.Study, trial: optuna.Trial, setup: GroupSetup, result: GroupTrialResult
) -> float | None:
    for m in setup.models:
        trial.set_user_attr(f"model:{m.name}", _model_attrs(result.records[m.name], m.setup.objective.metric))
    trial.set_user_attr("group_ratios", dict(result.score.ratios))
    if result.reason is not None:
        trial.set_user_attr("group_reason", result.reason)
    feasible = result.ok and result.score.value is not None
    store_constraints(trial, ["group_feasible"], [0.0 if feasible else 1.0])
    if feasible and result.score.value is not None:
        study.tell(trial, result.score.value)
        return result.score.value
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # no value, never a sentinel
    return None


def _kinds(
    study: optuna.Study, baseline: GroupTrialResult | None, first: Mapping[str, float] | None, n_trials: int
) -> list[str]:
    """What the next ``n_trials`` trials are: the baseline group and the prior's split unless the
    study has measured them, then sampled ones."""
    prior_done = any(t.user_attrs.get("group_trial") == "prior" for t in study.get_trials(deepcopy=False))
    return [
        *([] if baseline is not None else ["baseline"]),
        *(["prior"] if first is not None and not prior_done else []),
        *["sampled"] * n_trials,
    ][:n_trials]


@dataclass(frozen=True)
class _Loop:
    """What every trial of one :func:`run_group_study` call shares."""

    setup: GroupSetup
    evaluate: GroupEvaluator
    study: optuna.Study
    first: Mapping[str, float] | None
    attrs: Mapping[str, Any]

    def trial(
        self, kind: str, baseline: GroupTrialResult | None
    ) -> tuple[GroupTrialReport, GroupTrialResult | None]:
        """One group trial of ``kind``, told to the study: its report, and its result when it ran (a
        split that cannot run is failed before launch, PRUNED with ``group_feasible`` violated)."""
        study, setup = self.study, self.setup
        trial, split, values = _ask(study, setup, kind, self.first)
        for key, attr in {**self.attrs, "group_trial": kind, "split": dict(split)}.items():
            trial.set_user_attr(key, attr)
        if kind == "baseline":
            trial.set_user_attr("baseline", True)
        infeasible = setup.infeasible(split, values)
        if infeasible:
            reason = "infeasible before launch: " + "; ".join(infeasible)
            trial.set_user_attr("group_reason", reason)
            store_constraints(trial, ["group_feasible"], [1.0])
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return GroupTrialReport(trial.number, kind, dict(split), None, {}, reason), None
        result = self.evaluate(trial.number, split, values, baseline)
        value = _tell(study, trial, setup, result)
        saturated = {
            n: r.figures.saturation_note for n, r in result.records.items() if r.saturated and r.figures
        }
        report = GroupTrialReport(
            trial.number, kind, dict(split), value, dict(result.score.ratios), result.reason, saturated
        )
        return report, result


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
    """``n_trials`` more group trials into ``study`` (minimised): the baseline group, the prior's
    split, then sampled ones; a resumed study keeps the baseline group and the prior's split it has
    measured (every later trial is held against that baseline). The baseline group failing stops
    the study (nothing to compare with). ``baseline``: the baseline group measured elsewhere (a
    night's, on tonight's traffic), held against instead of the study's; ``attrs``: set on every
    trial; ``should_stop``: asked before each trial (a night's budget)."""
    baseline = baseline or stored_baseline(study, setup)
    loop = _Loop(setup, evaluate, study, first, attrs or {})
    for kind in _kinds(study, baseline, first, n_trials):
        if should_stop is not None and should_stop():
            break
        report, result = loop.trial(kind, baseline)
        if kind == "baseline":
            baseline = result
        if on_done is not None:
            on_done(report)
        if kind == "baseline":
            _check_baseline(baseline, report.reason)
    return study
