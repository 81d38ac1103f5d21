"""A group of models on one server, where it differs from one engine: the split of the shared KV budget
(``split.NAME``) and each model's share, the group's trial (N engines started, N workloads replayed at
once, N results), the group's measurement in the one study loop (:class:`GroupMeasure`, run by
:class:`~autotune.study.StudyRunner` as one engine's trials are), the prior's split, the dry run's
preview, the A B A B confirmation of the best group, its export with the launch file, and the deployed
group a night re-measures."""

from __future__ import annotations

from autotune.tuning.group._confirm import confirm_group
from autotune.tuning.group._deployed import DEPLOYED_ATTR, deployed_trial, record_deployed
from autotune.tuning.group._export import baseline_group_trial, best_group_trial, export_group
from autotune.tuning.group._preview import GroupPreview, preview_group
from autotune.tuning.group._prior import prior_split
from autotune.tuning.group._setup import GroupSetup, build_group
from autotune.tuning.group._study import (
    GROUP_FINGERPRINT_ATTR,
    GroupMeasure,
    GroupTrialReport,
    check_group_fingerprint,
    group_fingerprint,
    run_group_study,
    stored_baseline,
)
from autotune.tuning.group._trial import GroupEvaluator, GroupTrialResult

__all__ = [
    "DEPLOYED_ATTR",
    "GROUP_FINGERPRINT_ATTR",
    "GroupEvaluator",
    "GroupMeasure",
    "GroupPreview",
    "GroupSetup",
    "GroupTrialReport",
    "GroupTrialResult",
    "baseline_group_trial",
    "best_group_trial",
    "build_group",
    "check_group_fingerprint",
    "confirm_group",
    "deployed_trial",
    "export_group",
    "group_fingerprint",
    "preview_group",
    "prior_split",
    "record_deployed",
    "run_group_study",
    "stored_baseline",
]
