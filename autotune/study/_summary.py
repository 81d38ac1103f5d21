"""Why a study found nothing feasible, in one line with the fix its dominant reason needs."""

from __future__ import annotations

import optuna

from autotune.study._best import best_feasible, completed_trials
from autotune.study._record import TrialRecord, read_record

__all__ = ["baseline_saturation", "failure_summary", "saturation_summary"]

_FIX = "; fix: "


def _fix(rec: TrialRecord) -> str:
    note = rec.figures.saturation_note if rec.figures is not None else ""
    return note.rpartition(_FIX)[2] or "a lower --speed or --rate, or a shorter workload"


def baseline_saturation(rec: TrialRecord) -> str | None:
    """Said right after a saturated baseline: its figures are a queue that a configuration may or may not cure."""
    if not (rec.baseline and rec.saturated) or rec.figures is None:
        return None
    evidence = rec.figures.saturation_note.partition(" (")[2].rpartition(_FIX)[0].removesuffix(")")
    return (
        f"the baseline saturated the server: its requests queued behind the arrivals ({evidence}); a "
        "configuration that keeps up beats it by the length of that queue, and if none does the load is "
        f"the problem, not the configuration; fix: {_fix(rec)}"
    )


def saturation_summary(study: optuna.Study) -> str | None:
    """The closing sentence of a study whose every measured trial saturated the server (None otherwise)."""
    measured = [
        r for r in (read_record(t) for t in completed_trials(study)) if r.ok and r.figures is not None
    ]
    if not measured or not all(r.saturated for r in measured):
        return None
    n = len(measured)
    return (
        f"every measured trial saturated the server ({n} of {n}): the figures measure its queue, not the "
        f"configurations, so the best is not evidence of a better configuration; fix: {_fix(measured[0])}"
    )


def failure_summary(study: optuna.Study) -> str | None:
    """Why the study has no feasible trial, from the dominant reason, with the fix that reason needs
    (None when a trial is feasible)."""
    if best_feasible(study) is not None:
        return None
    classes: dict[str, int] = {}
    requests: dict[str, int] = {}
    trials = [read_record(t) for t in completed_trials(study) if t.user_attrs.get("status")]
    for rec in trials:
        if rec.ok and rec.figures is not None and rec.figures.failed:
            classes["failed_requests"] = classes.get("failed_requests", 0) + 1
            for why, n in rec.figures.failures.items():
                requests[why] = requests.get(why, 0) + n
        elif not rec.ok:
            key = rec.failure or "failed"
            classes[key] = classes.get(key, 0) + 1
            if rec.failure == "no_success" and rec.figures is not None:
                for why, n in rec.figures.failures.items():
                    requests[why] = requests.get(why, 0) + n
        else:
            classes["constraints"] = classes.get("constraints", 0) + 1
    if not classes:
        return "no trial finished"
    top, count = max(classes.items(), key=lambda kv: kv[1])
    fixes = {
        "failed_requests": "the server refused requests of the workload, whatever the configuration (fix: the "
        "workload or --max-model-len, not the search space)",
        "no_success": "no request succeeded (fix: the workload, the API key or --max-model-len, not the search space)",
        "does_not_fit": "configurations do not fit this machine's memory (fix: smaller KV or offload settings, a "
        "lower --max-model-len, or --host-share)",
        "bad_flag": "the engine refused the flags (fix: the fixed --engine-arg flags or the space's values)",
        "out_of_memory": "the engine ran out of memory at start (fix: a lower gpu-memory-utilization or KV size)",
        "constraints": "trials ran but missed a constraint (fix: relax --slo / --min-throughput-ratio or widen the space)",
    }
    line = f"{count} of {len(trials)} trials: {fixes.get(top, top + ' (fix: look at the trial logs)')}"
    if requests and top in ("failed_requests", "no_success"):
        reason, n = max(requests.items(), key=lambda kv: kv[1])
        line += f"; most failed requests ({n}): {reason}"
    return line
