"""The Optuna loop of a group of models on one server: the baseline group first (``share.baseline``,
or an equal split, each model's fixed flags), then the prior's split (when it has one), then
sampled splits and configurations (``split.NAME`` and ``NAME.param``), each one group trial.

A trial's value is the group's objective (the baseline group scores 1.0); each model's figures,
command, log and reason are its user attrs (``model:NAME``). A split that cannot run is failed
before launch with each model's reason; a failed or infeasible group trial is data, kept as Optuna
keeps a trial without a value: PRUNED, its ``group_feasible`` constraint violated, its reason kept.
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
    (as one engine's study hashes them) and its weight, and the budget with the baseline's split."""
    out: dict[str, dict[str, str]] = {}
    for m in setup.models:
        for key, value in study_fingerprint(m.setup).items():
            out[f"{m.name}.{key}"] = value
        out[f"{m.name}.weight"] = {"sha": f"{m.weight:g}", "what": f"weight {m.weight:g}"}
    base = ", ".join(f"{n} {setup.baseline[n]:.3f}" for n in setup.names)
    what = f"{setup.budget.total_text()}, baseline {base} ({setup.baseline_source})"
    out["share"] = {"sha": hashlib.sha256(what.encode()).hexdigest()[:16], "what": what}
    return out


def check_group_fingerprint(study: optuna.Study, setup: GroupSetup) -> None:
    """Refuse to resume a group study made for other models, workloads, spaces, weights or budget: its
    baseline group and trials would be held against figures of something else. A study that records
    none yet gets this group's."""
    mine = group_fingerprint(setup)
    recorded = study.user_attrs.get(GROUP_FINGERPRINT_ATTR)
    if not recorded:
        study.set_user_attr(GROUP_FINGERPRINT_ATTR, mine)
        return
    diffs = fingerprint_diffs(recorded, mine, "this run") + [
        f"{key}: the study has no such part, this run {value['what']}"
        for key, value in mine.items()
        if key not in recorded
    ]
    if diffs:
        raise ConfigError(
            f"study {study.study_name!r} measures another group: {'; '.join(diffs)} "
            "(fix: the study's group file as it was, or a new --study name)"
        )


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
    prior_done = any(t.user_attrs.get("group_trial") == "prior" for t in study.get_trials(deepcopy=False))
    kinds = [
        *([] if baseline is not None else ["baseline"]),
        *(["prior"] if first is not None and not prior_done else []),
        *["sampled"] * n_trials,
    ][:n_trials]
    for kind in kinds:
        if should_stop is not None and should_stop():
            break
        trial, split, values = _ask(study, setup, kind, first)
        for key, attr in (attrs or {}).items():
            trial.set_user_attr(key, attr)
        trial.set_user_attr("group_trial", kind)
        trial.set_user_attr("split", dict(split))
        if kind == "baseline":
            trial.set_user_attr("baseline", True)
        infeasible = setup.infeasible(split, values)
        value: float | None = None
        ratios: Mapping[str, float] = {}
        reason: str | None
        saturated: dict[str, str] = {}
        if infeasible:
            reason = "infeasible before launch: " + "; ".join(infeasible)
            trial.set_user_attr("group_reason", reason)
            store_constraints(trial, ["group_feasible"], [1.0])
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            result = evaluate(trial.number, split, values, baseline)
            value, ratios, reason = _tell(study, trial, setup, result), result.score.ratios, result.reason
            saturated = {
                n: r.figures.saturation_note for n, r in result.records.items() if r.saturated and r.figures
            }
            if kind == "baseline":
                baseline = result
        if on_done is not None:
            on_done(GroupTrialReport(trial.number, kind, dict(split), value, dict(ratios), reason, saturated))
        if kind == "baseline" and baseline is not None and baseline.measured and not baseline.ok:
            log.warning("the baseline group is measured but misses: %s; it stays the reference", reason)
        if kind == "baseline" and (baseline is None or not baseline.measured):
            raise AutotuneError(
                f"the baseline group failed: {reason} (fix: give each model a share that holds it in "
                "share.baseline, or a larger share total)"
            )
    return study
