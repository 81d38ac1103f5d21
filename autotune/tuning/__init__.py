"""From the user's choices to measurements: the one evaluator assembly (:func:`build_setup`),
confirmation before export, the baseline's reference and the dry run; parallel workers, one
per GPU or tensor-parallel group (:func:`plan_groups`, :func:`run_parallel`, :func:`run_worker`);
and a group of models on one server, in :mod:`autotune.tuning.group`."""

from __future__ import annotations

from autotune.tuning._bench import bench_server
from autotune.tuning._confirm import confirm_best
from autotune.tuning._dry_run import CommandPreview, preview_commands
from autotune.tuning._fingerprint import (
    FINGERPRINT_ATTR,
    check_fingerprint,
    effective_fingerprint,
    record_effective_study,
    space_change_note,
    study_fingerprint,
)
from autotune.tuning._forecast import StudyForecast
from autotune.tuning._forecast_ledger import forecast_summary
from autotune.tuning._gpus import GpuGroup, for_gpus, on_gpus, parse_gpus, plan_groups, record_devices
from autotune.tuning._lock import StudyLock, claim_worker_slot
from autotune.tuning._open import FORMATS_ATTR, open_study, study_directory
from autotune.tuning._policy import TrialScope
from autotune.tuning._reference import BaselinePlan, plan_baseline, recheck_baseline
from autotune.tuning._setup import TuningSetup, build_setup, check_study_name
from autotune.tuning._worker import RUN_ATTR, WorkerSpec, run_worker, study_choices
from autotune.tuning._workers import ParallelRun, run_parallel
from autotune.tuning.group import (
    DEPLOYED_ATTR,
    GROUP_FINGERPRINT_ATTR,
    GroupEvaluator,
    GroupPreview,
    GroupSetup,
    GroupTrialReport,
    GroupTrialResult,
    baseline_group_trial,
    best_group_trial,
    build_group,
    check_group_fingerprint,
    confirm_group,
    deployed_trial,
    export_group,
    group_fingerprint,
    preview_group,
    prior_split,
    record_deployed,
    run_group_study,
    stored_baseline,
)

__all__ = [
    "DEPLOYED_ATTR",
    "FINGERPRINT_ATTR",
    "FORMATS_ATTR",
    "GROUP_FINGERPRINT_ATTR",
    "RUN_ATTR",
    "BaselinePlan",
    "CommandPreview",
    "GpuGroup",
    "GroupEvaluator",
    "GroupPreview",
    "GroupSetup",
    "GroupTrialReport",
    "GroupTrialResult",
    "ParallelRun",
    "StudyForecast",
    "StudyLock",
    "TrialScope",
    "TuningSetup",
    "WorkerSpec",
    "baseline_group_trial",
    "bench_server",
    "best_group_trial",
    "build_group",
    "build_setup",
    "check_fingerprint",
    "check_group_fingerprint",
    "check_study_name",
    "claim_worker_slot",
    "confirm_best",
    "confirm_group",
    "deployed_trial",
    "effective_fingerprint",
    "export_group",
    "for_gpus",
    "forecast_summary",
    "group_fingerprint",
    "on_gpus",
    "open_study",
    "parse_gpus",
    "plan_baseline",
    "plan_groups",
    "preview_commands",
    "preview_group",
    "prior_split",
    "recheck_baseline",
    "record_deployed",
    "record_devices",
    "record_effective_study",
    "run_group_study",
    "run_parallel",
    "run_worker",
    "space_change_note",
    "stored_baseline",
    "study_choices",
    "study_directory",
    "study_fingerprint",
]
