"""One configuration measured: the evaluator that starts an engine, replays the workload (in
passes, the prefix cache emptied between them) and records the trial; the memory guard that
checks a command before launch and watches the run; the requests' timings on disk; the request
sizes checked against the model; and the A/B comparison of two configurations, whose alternation
(``alternate``) a group's confirmation runs too."""

from __future__ import annotations

from autotune.trial._clip import clip_space
from autotune.trial._compare import (
    ArmSummary,
    Comparison,
    alternate,
    compare_configs,
    compare_recorded,
    config_to_args,
    read_measurement,
    significant_gain,
)
from autotune.trial._evaluator import VllmEvaluator, no_success_reason
from autotune.trial._fit_requests import check_request_sizes, model_max_len
from autotune.trial._memory_guard import MemoryGuard, clamp_space
from autotune.trial._passes import (
    DEV_MODE_ENV,
    MAX_AUTO_PASSES,
    PassPlan,
    combine_passes,
    parse_passes,
    reset_leak,
    spread,
)
from autotune.trial._requests import read_request_timings, write_request_timings

__all__ = [
    "DEV_MODE_ENV",
    "MAX_AUTO_PASSES",
    "ArmSummary",
    "Comparison",
    "MemoryGuard",
    "PassPlan",
    "VllmEvaluator",
    "alternate",
    "check_request_sizes",
    "clamp_space",
    "clip_space",
    "combine_passes",
    "compare_configs",
    "compare_recorded",
    "config_to_args",
    "model_max_len",
    "no_success_reason",
    "parse_passes",
    "read_measurement",
    "read_request_timings",
    "reset_leak",
    "significant_gain",
    "spread",
    "write_request_timings",
]
