"""Optuna studies: suggest, constrain, persist, and the typed trial record. Never opens a socket
or a subprocess, and never imports ``engine`` or ``bench``."""

from __future__ import annotations

from autotune.metrics import figure_text, unit  # their home: the metric registry
from autotune.study._baseline import (
    REFERENCE_ATTR,
    baseline_trial,
    baseline_what,
    ensure_baseline,
    load_or_create,
    reference_config,
    study_sampler,
)
from autotune.study._best import best_feasible, completed_trials, in_scope, unmeasured
from autotune.study._gates import GateVerdict, standard_gates
from autotune.study._group_objective import (
    GroupMode,
    GroupScore,
    ModelOutcome,
    fold_group,
    group_score,
    model_ratio,
    worse_beyond_noise,
)
from autotune.study._journal import PendingJournal
from autotune.study._measure import TrialMeasure, suggest_values
from autotune.study._objective import Objective, parse_slo
from autotune.study._orphans import fail_orphaned_trials
from autotune.study._policy import TrialPolicy
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import (
    BASELINE_ATTR,
    FORECAST_ATTR,
    GROUP_FINGERPRINT_ATTR,
    Evaluator,
    Figures,
    Metrics,
    Prestarter,
    TrialListener,
    TrialRecord,
    TrialStatus,
    constraints_hold,
    read_record,
    store_constraints,
    write_record,
)
from autotune.study._runner import Measure, StudyRunner, TrialHooks, TrialReport, run_study
from autotune.study._split import member_params, split_fractions, split_params, suggest_member, suggest_split
from autotune.study._storage import STORAGE_ENV, open_storage, redact_url, resolve_storage_url
from autotune.study._summary import baseline_saturation, failure_summary, saturation_summary
from autotune.study._trust import COST_FIGURES, choose_export, export_costs

__all__ = [
    "BASELINE_ATTR",
    "COST_FIGURES",
    "FORECAST_ATTR",
    "GROUP_FINGERPRINT_ATTR",
    "REFERENCE_ATTR",
    "STORAGE_ENV",
    "Evaluator",
    "Figures",
    "GateVerdict",
    "GroupMode",
    "GroupScore",
    "IncumbentPruner",
    "Measure",
    "Metrics",
    "ModelOutcome",
    "Objective",
    "PendingJournal",
    "Prestarter",
    "StudyRunner",
    "TrialHooks",
    "TrialListener",
    "TrialMeasure",
    "TrialPolicy",
    "TrialRecord",
    "TrialReport",
    "TrialStatus",
    "baseline_saturation",
    "baseline_trial",
    "baseline_what",
    "best_feasible",
    "choose_export",
    "completed_trials",
    "constraints_hold",
    "ensure_baseline",
    "export_costs",
    "fail_orphaned_trials",
    "failure_summary",
    "figure_text",
    "fold_group",
    "group_score",
    "in_scope",
    "load_or_create",
    "member_params",
    "model_ratio",
    "open_storage",
    "parse_slo",
    "read_record",
    "redact_url",
    "reference_config",
    "resolve_storage_url",
    "run_study",
    "saturation_summary",
    "split_fractions",
    "split_params",
    "standard_gates",
    "store_constraints",
    "study_sampler",
    "suggest_member",
    "suggest_split",
    "suggest_values",
    "unit",
    "unmeasured",
    "worse_beyond_noise",
    "write_record",
]
