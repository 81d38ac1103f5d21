"""From the user's choices to measurements: the one evaluator assembly (:func:`build_setup`),
one trial end to end (:class:`VllmEvaluator`), its memory checks, A/B re-measurement,
confirmation before export, the baseline's reference and the dry run."""

from __future__ import annotations

from autotune.tuning._compare import ArmSummary, Comparison, compare_configs, config_to_args, significant_gain
from autotune.tuning._confirm import confirm_best
from autotune.tuning._dry_run import CommandPreview, preview_commands
from autotune.tuning._evaluator import VllmEvaluator, no_success_reason
from autotune.tuning._lock import StudyLock
from autotune.tuning._memory_guard import MemoryGuard, clamp_space
from autotune.tuning._model import check_model, looks_like_hub_name
from autotune.tuning._open import FORMATS_ATTR, OpenedStudy, open_study, study_directory
from autotune.tuning._reference import BaselinePlan, plan_baseline
from autotune.tuning._requests import read_request_timings, write_request_timings
from autotune.tuning._setup import (
    ArrivalChoice,
    TuningChoices,
    TuningSetup,
    build_setup,
    check_study_name,
    describe_params,
)

__all__ = [
    "FORMATS_ATTR",
    "ArmSummary",
    "ArrivalChoice",
    "BaselinePlan",
    "CommandPreview",
    "Comparison",
    "MemoryGuard",
    "OpenedStudy",
    "StudyLock",
    "TuningChoices",
    "TuningSetup",
    "VllmEvaluator",
    "build_setup",
    "check_model",
    "check_study_name",
    "clamp_space",
    "compare_configs",
    "config_to_args",
    "confirm_best",
    "describe_params",
    "looks_like_hub_name",
    "no_success_reason",
    "open_study",
    "plan_baseline",
    "preview_commands",
    "read_request_timings",
    "significant_gain",
    "study_directory",
    "write_request_timings",
]
