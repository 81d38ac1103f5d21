"""Optuna studies: suggest, constrain, persist, and the typed trial record. Never opens a socket
or a subprocess, and never imports ``engine`` or ``bench``."""

from __future__ import annotations

from autotune.study._journal import PendingJournal, storage_fault
from autotune.study._objective import Objective, parse_slo
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import (
    BASELINE_ATTR,
    RECORD_VERSION,
    Evaluator,
    Figures,
    Metrics,
    Progress,
    TrialRecord,
    TrialStatus,
    constraints_hold,
    read_record,
    write_record,
)
from autotune.study._runner import (
    REFERENCE_ATTR,
    TrialReport,
    baseline_trial,
    best_feasible,
    ensure_baseline,
    failure_summary,
    load_or_create,
    render_reference,
    run_study,
    suggest_values,
)
from autotune.study._storage import STORAGE_ENV, open_storage, redact_url, resolve_storage_url

__all__ = [
    "BASELINE_ATTR",
    "RECORD_VERSION",
    "REFERENCE_ATTR",
    "STORAGE_ENV",
    "Evaluator",
    "Figures",
    "IncumbentPruner",
    "Metrics",
    "Objective",
    "PendingJournal",
    "Progress",
    "TrialRecord",
    "TrialReport",
    "TrialStatus",
    "baseline_trial",
    "best_feasible",
    "constraints_hold",
    "ensure_baseline",
    "failure_summary",
    "load_or_create",
    "open_storage",
    "parse_slo",
    "read_record",
    "redact_url",
    "render_reference",
    "resolve_storage_url",
    "run_study",
    "storage_fault",
    "suggest_values",
    "write_record",
]
