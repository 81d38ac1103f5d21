"""Optuna studies: suggest, constrain, persist. Never opens a socket or a subprocess."""

from __future__ import annotations

from autotune.study._objective import Objective, parse_slo
from autotune.study._runner import (
    BASELINE_ATTR,
    StudyRun,
    TrialReport,
    baseline_trial,
    best_feasible,
    load_or_create,
    run_study,
    suggest_values,
)
from autotune.study._storage import STORAGE_ENV, open_storage, redact_url, resolve_storage_url

__all__ = [
    "BASELINE_ATTR",
    "STORAGE_ENV",
    "Objective",
    "StudyRun",
    "TrialReport",
    "baseline_trial",
    "best_feasible",
    "load_or_create",
    "open_storage",
    "parse_slo",
    "redact_url",
    "resolve_storage_url",
    "run_study",
    "suggest_values",
]
