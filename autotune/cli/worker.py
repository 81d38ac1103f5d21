"""``autotune worker``: join an existing study and measure trials on this host's GPUs (or its share).

Started by ``autotune run --gpus`` (one per GPU or tensor-parallel group, with ``--spec``), or by hand
or by a scheduler on other hosts and pods (a Kubernetes Indexed Job: ``--index`` defaults to
``$JOB_COMPLETION_INDEX``) against a shared storage such as PostgreSQL. The study says what it
measures (workload, model, space, flags, arrivals, objective), so ``--study`` and ``--storage`` are
enough; an option given here overrides the study's (a path that differs on this host), and the
files it names must hash as the study's did.
"""

from __future__ import annotations

import os
from typing import Any

from autotune.cli._console import console, log_to_file
from autotune.cli._study_options import study_command
from autotune.errors import ConfigError
from autotune.study import TrialReport
from autotune.studyfile import StudySpec
from autotune.tuning import (
    GpuGroup,
    WorkerSpec,
    check_study_name,
    claim_worker_slot,
    parse_gpus,
    run_worker,
    study_choices,
)
from autotune.usecases import trial_line

__all__ = ["worker"]


def _index_default() -> int | None:
    try:
        return int(os.environ["JOB_COMPLETION_INDEX"])
    except (KeyError, ValueError):
        return None


def _recorded(spec: StudySpec) -> dict[str, Any] | None:
    """The study's own keys (``autotune worker --study NAME`` needs nothing else)."""
    if spec.spec_file is not None or spec.study is None:
        return None
    return study_choices(spec.storage, check_study_name(spec.study), spec.studies_dir, create=spec.create)


@study_command("worker", recorded=_recorded)
def worker(spec: StudySpec) -> None:
    """Join a study and measure trials with it: the same space, workload and model (checked against
    what the study recorded), on this worker's GPUs, leased so that no other worker uses them.

    Exit codes: 0 done; 1 storage or other error; 2 bad input or a study made for another space, workload
    or model; 6 a GPU is leased by another worker; 130 interrupted.
    """
    if spec.spec_file is not None:
        pooled = WorkerSpec.load(spec.spec_file)
        if pooled.log_path is not None:
            pooled.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_to_file(pooled.log_path)
        _, slot_lock = claim_worker_slot(pooled.storage, pooled.study, pooled.studies_dir, pooled.group.slot)
        with slot_lock:
            run_worker(pooled)
        return
    if spec.study is None:
        raise ConfigError("worker: --study is required (fix: the name of the study to join)")
    if spec.workload is None or spec.model is None:
        raise ConfigError(
            f"worker: study {spec.study} records no workload and model (made by an older version, or not made "
            "yet) (fix: pass --workload and --model, the study's own)"
        )
    wanted_slot = spec.index if spec.index is not None else _index_default()
    slot, slot_lock = claim_worker_slot(spec.storage, spec.study, spec.studies_dir, wanted_slot)
    if wanted_slot is None:
        console.print(f"worker {slot}: the lowest number no other worker of study {spec.study} holds")
    wanted = parse_gpus(spec.gpus) if spec.gpus else None
    job = WorkerSpec(
        choices=spec,
        study=check_study_name(spec.study),
        studies_dir=spec.studies_dir,
        storage=spec.storage,
        group=GpuGroup(slot=slot, gpus=wanted or ()),
        seed=spec.seed + slot,  # the study's seed unless --seed: workers' samplers differ
        n_trials=spec.n_trials,
        total_trials=spec.total_trials,
        timeout_s=spec.timeout,
        create=spec.create,
    )
    log_path = spec.studies_dir / spec.study / "workers" / f"worker-{slot}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_to_file(log_path)

    def on_done(rep: TrialReport) -> None:
        console.print(trial_line(rep, spec.objective), soft_wrap=True)

    with slot_lock:
        ran = run_worker(job, on_trial_done=on_done)
    console.print(f"worker {slot}: {ran} trial(s) measured into study {spec.study}")
