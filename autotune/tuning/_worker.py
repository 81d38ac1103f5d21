"""One worker of a parallel study (``autotune worker``): it leases its GPUs, joins the study --
refusing one whose space, workload or model differs from what the study recorded
(:func:`~autotune.tuning._fingerprint.check_fingerprint`) -- and measures trials until the pool's count,
the study's total or the time is reached. The baseline is measured once: worker 0 takes it; the
others wait until it is taken, then start their own engines at once and hold their replays until
the baseline is measured (its throughput is a constraint of every other trial), so engine
start-ups overlap. Each trial records which GPUs measured it (``gpus``, ``gpu_name``).

Sampler seeds differ per worker (the run's seed + the worker's slot); arrivals and sampling of the
workload keep the run's seed, so every worker replays the same traffic. The pool that starts
workers is :mod:`autotune.tuning._workers`.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import GpuLease
from autotune.errors import ConfigError, StorageError
from autotune.memory import MachineProbe, read_machine_facts
from autotune.study import (
    BASELINE_ATTR,
    TrialHooks,
    TrialReport,
    load_or_create,
    open_storage,
    redact_url,
    resolve_storage_url,
    run_study,
)
from autotune.studyfile import StudySpec
from autotune.tuning._fingerprint import (
    check_fingerprint,
    from_jsonable,
    record_effective_study,
    recorded_choices,
    to_jsonable,
)
from autotune.tuning._gpus import GpuGroup, complete_group, for_gpus, record_devices
from autotune.tuning._open import open_study, study_directory
from autotune.tuning._policy import TrialScope
from autotune.tuning._reference import plan_baseline
from autotune.tuning._setup import TuningSetup, build_setup, describe_params

__all__ = [
    "EXIT_BUSY",
    "EXIT_USAGE",
    "RUN_ATTR",
    "WorkerSpec",
    "baseline_gate",
    "count_trials",
    "run_worker",
    "study_choices",
    "wait_for_baseline",
]

log = logging.getLogger(__name__)

RUN_ATTR = "pool_run"  # trial attr: the pool run that measured it
PR_SET_PDEATHSIG = 1
EXIT_BUSY, EXIT_USAGE = 6, 2  # a worker that exits so will fail again: not restarted


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs, as the pool hands it over (JSON in a file: :meth:`dump`)."""

    choices: StudySpec
    study: str
    studies_dir: Path
    storage: str | None = None  # as the user gave it (None: $AUTOTUNE_STORAGE, else the SQLite default)
    group: GpuGroup = field(default_factory=lambda: GpuGroup(slot=0))
    seed: int | None = None  # this worker's sampler seed
    n_trials: int | None = None  # at most this many trials by this worker
    run_id: str | None = None  # the pool run: tags its trials (RUN_ATTR)
    run_trials: int | None = None  # stop when the run has this many trials (all workers)
    total_trials: int | None = None  # stop when the study has this many finished or running trials
    timeout_s: float | None = None
    create: bool = False  # create the study when it does not exist (else refuse)
    baseline_since: float | None = None  # a running baseline started before this (epoch s) is stale
    parent_pid: int | None = None  # die with this process (the pool)
    log_path: Path | None = None

    def dump(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(to_jsonable(self), indent=1))
        return path

    @classmethod
    def load(cls, path: Path) -> WorkerSpec:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--spec: cannot read {path}: {exc}") from exc
        spec = from_jsonable(cls, data)
        assert isinstance(spec, WorkerSpec)
        return spec


def _existing(storage: str | None, name: str, studies_dir: Path, create: bool) -> tuple[str, bool]:
    """The study's storage URL and whether the study exists there; a missing one is refused unless
    ``create``."""
    url = resolve_storage_url(storage, name, studies_dir)
    exists = name in optuna.study.get_all_study_names(storage=open_storage(url))
    if not exists and not create:
        raise StorageError(
            f"no study {name!r} in {redact_url(url)} (fix: start it with `autotune run --study {name}` and "
            "the same --storage, or pass --create to one worker)"
        )
    return url, exists


def study_choices(
    storage: str | None, name: str, studies_dir: Path, *, create: bool = False
) -> dict[str, Any] | None:
    """The study keys an existing study was created with (:data:`~autotune.tuning._fingerprint.CHOICES_ATTR`), so that
    ``autotune worker --study NAME --storage URL`` needs nothing else; None when it records none (or
    does not exist yet and ``create``)."""
    url, exists = _existing(storage, name, studies_dir, create)
    return recorded_choices(optuna.load_study(study_name=name, storage=open_storage(url))) if exists else None


def _join(setup: TuningSetup, spec: WorkerSpec) -> optuna.Study:
    url, exists = _existing(spec.storage, spec.study, spec.studies_dir, spec.create)
    if exists:
        study = load_or_create(url, spec.study, setup.objective, spec.seed)
    else:
        plan = plan_baseline(setup)
        study = open_study(setup, spec.study, spec.storage, spec.studies_dir, spec.seed, plan).study
    check_fingerprint(study, setup)
    record_effective_study(study, setup)
    guard = setup.guard
    record_devices(study, (spec.group,), read_machine_facts(guard.probe if guard else None))
    return study


def _pending_baseline(study: optuna.Study, since: float | None, *, claimed: bool = True) -> bool:
    """A baseline is waiting to be measured, or (``claimed``) being measured, started after ``since``."""
    for t in study.get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING)
    ):
        if not t.user_attrs.get(BASELINE_ATTR):
            continue
        if t.state is optuna.trial.TrialState.WAITING:
            return True
        if not claimed:
            continue
        started = t.datetime_start.timestamp() if t.datetime_start else None
        if since is None or started is None or started >= since:
            return True
    return False


def wait_for_baseline(
    study: optuna.Study, *, since: float | None, timeout_s: float, poll_s: float = 1.0, claimed: bool = True
) -> bool:
    """Block while the study's baseline is pending (True: it no longer is; False: timed out).

    ``claimed=False``: only until a worker has taken it (it is no longer waiting in the queue)."""
    deadline = time.monotonic() + timeout_s
    announced = False
    while _pending_baseline(study, since, claimed=claimed):
        if not announced:
            log.info("waiting for the baseline, which another worker measures")
            announced = True
        if time.monotonic() > deadline:
            log.warning("the baseline is still pending after %.0f s: starting anyway", timeout_s)
            return False
        time.sleep(poll_s)
    return True


def baseline_gate(study: optuna.Study, since: float | None, timeout_s: float) -> Callable[[], None]:
    """What a worker's trial waits for once its engine is up and before it replays: the measured
    baseline (the throughput constraint needs its figure). The engine's start-up, the dearest part
    of a trial, overlaps the baseline's measurement instead of following it."""

    def gate() -> None:
        wait_for_baseline(study, since=since, timeout_s=timeout_s)

    return gate


# -- one worker ----------------------------------------------------------------------------------
def _die_with_parent(parent_pid: int | None) -> None:
    """SIGTERM (which unwinds like Ctrl-C, stopping the engine) when the pool dies, even by SIGKILL."""
    if parent_pid is None:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        log.warning("cannot ask to be stopped with the pool (prctl): relying on the pool's stop")
    if os.getppid() != parent_pid:  # the pool died before we asked
        os.kill(os.getpid(), signal.SIGTERM)


def count_trials(study: optuna.Study, run_id: str | None) -> int:
    """Trials started or finished (not waiting): of the pool run ``run_id``, or of the whole study."""
    waiting = optuna.trial.TrialState.WAITING
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.state is not waiting and (run_id is None or t.user_attrs.get(RUN_ATTR) == run_id)
    )


def run_worker(
    spec: WorkerSpec,
    *,
    probe: MachineProbe | None = None,
    on_trial_done: Callable[[TrialReport], None] | None = None,
) -> int:
    """One worker, start to end (see the module doc). Returns how many trials it ran."""
    _die_with_parent(spec.parent_pid)
    started = time.monotonic()
    with build_setup(spec.choices) as base:
        group = complete_group(spec.group, base.platform, probe)
        with GpuLease(group.gpus, owner=f"study {spec.study} worker {group.slot}") as lease:
            setup = for_gpus(base, group, lease, probe=probe)
            study = _join(setup, dataclasses.replace(spec, group=group))
            setup = setup.with_prior()  # the same prediction and veto in every worker (the parent enqueued)
            gate = None
            if group.slot > 0:  # a baseline running longer than this is presumed orphaned (its worker died)
                patience = spec.choices.startup_timeout + 1800
                since = spec.baseline_since if spec.baseline_since is not None else time.time() - patience
                # worker 0 takes the baseline; this one starts its own engine meanwhile and replays
                # once the baseline is measured (its gate), so the two engines start in parallel
                wait_for_baseline(study, since=since, timeout_s=min(patience, 120.0), claimed=False)
                gate = baseline_gate(study, since, patience)

            def should_stop() -> bool:
                if spec.run_trials is not None and count_trials(study, spec.run_id) >= spec.run_trials:
                    return True
                return spec.total_trials is not None and count_trials(study, None) >= spec.total_trials

            if should_stop():
                log.info("nothing left to run: the study has its trials")
                return 0
            timeout = None
            if spec.timeout_s is not None:
                timeout = spec.timeout_s - (time.monotonic() - started)
                if timeout <= 0:
                    return 0
            ran = {"n": 0}
            attrs = {**group.trial_attrs(), "host": socket.gethostname()}
            if spec.run_id:
                attrs[RUN_ATTR] = spec.run_id

            def on_start(number: int, baseline: bool, params: Any) -> None:
                what = "baseline" if baseline else describe_params(params)
                log.info("trial %d on %s: %s", number, group.describe(), what)

            def on_done(rep: TrialReport) -> None:
                ran["n"] += 1
                log.info("trial %d: %s %s", rep.number, rep.record.status.value, rep.value)
                if on_trial_done is not None:
                    on_trial_done(rep)

            sdir = study_directory(spec.studies_dir, spec.study)
            scope = TrialScope(sdir, attrs=attrs, baseline_elsewhere=group.slot > 0, before_replay=gate)
            hooks = TrialHooks(on_start=on_start, on_done=on_done, should_stop=should_stop)
            run_study(study, setup.policy(scope), setup.evaluator(sdir), spec.n_trials, hooks, timeout)
            return ran["n"]
