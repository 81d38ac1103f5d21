"""Parallel workers on one study: one process per GPU (or tensor-parallel group), each with its own
engine, port, log and lease, all sharing the study through its storage.

:func:`run_parallel` is the pool behind ``autotune run --gpus``: it leases nothing itself while the
workers run; it starts one ``autotune worker`` per group, prints their trials as the storage
records them, restarts a worker that crashed (its replacement reclaims the lease), and on Ctrl-C,
SIGTERM or any error stops every worker (each stops its engine). Workers die with the pool: they
ask the kernel for SIGTERM when their parent dies (``PR_SET_PDEATHSIG``), and an engine's guardian
stops the engine when its worker dies. Afterwards the pool leases the first group again, so that
the confirmation re-measures best and baseline on one and the same GPUs.

:func:`run_worker` is one worker (``autotune worker``): it leases its GPUs, joins the study --
refusing one whose space, workload or model differs from what the study recorded
(:func:`check_fingerprint`) -- and measures trials until the pool's count, the study's total or the
time is reached. The baseline is measured once: worker 0 takes it; the others wait until it is
taken, then start their own engines at once and hold their replays until the baseline is measured
(its throughput is a constraint of every other trial), so engine start-ups overlap. Each trial records which GPUs measured it (``gpus``,
``gpu_name``) and each worker's devices are stored on the study; GPUs of different models are
said out loud (:func:`~autotune.tuning._gpus.gpu_mix`).

Sampler seeds differ per worker (the run's seed + the worker's slot); arrivals and sampling of the
workload keep the run's seed, so every worker replays the same traffic.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import GpuLease
from autotune.errors import AutotuneError, ConfigError, StorageError
from autotune.memory import MachineProbe, read_machine_facts
from autotune.study import (
    BASELINE_ATTR,
    PendingJournal,
    TrialReport,
    best_feasible,
    constraints_hold,
    ensure_baseline,
    load_or_create,
    open_storage,
    read_record,
    redact_url,
    resolve_storage_url,
    run_study,
)
from autotune.tuning._evaluator import VllmEvaluator
from autotune.tuning._gpus import (
    GpuGroup,
    check_fingerprint,
    complete_group,
    for_gpus,
    from_jsonable,
    record_devices,
    recorded_choices,
    to_jsonable,
)
from autotune.tuning._open import open_study, study_directory
from autotune.tuning._reference import plan_baseline
from autotune.tuning._setup import TuningChoices, TuningSetup, build_setup, describe_params

__all__ = [
    "RUN_ATTR",
    "ParallelRun",
    "WorkerSpec",
    "count_trials",
    "run_parallel",
    "run_worker",
    "study_choices",
]

log = logging.getLogger(__name__)

RUN_ATTR = "pool_run"  # trial attr: the pool run that measured it
PR_SET_PDEATHSIG = 1
EXIT_BUSY, EXIT_USAGE = 6, 2  # a worker that exits so will fail again: not restarted


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs, as the pool hands it over (JSON in a file: :meth:`dump`)."""

    choices: TuningChoices
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
) -> TuningChoices | None:
    """What an existing study was created with (:data:`~autotune.tuning._gpus.CHOICES_ATTR`), so that
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
            setup.apply_prior()  # the same prediction and veto in every worker (the parent enqueued)
            gate = None
            if group.slot > 0:  # a baseline running longer than this is presumed orphaned (its worker died)
                patience = spec.choices.startup_timeout_s + 1800
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

            run_study(
                study=study,
                space=setup.space,
                evaluator=setup.evaluator(study_directory(spec.studies_dir, spec.study)),
                objective=setup.objective,
                n_trials=spec.n_trials,
                timeout_s=timeout,
                on_trial_start=on_start,
                on_trial_done=on_done,
                trial_attrs=attrs,
                should_stop=should_stop,
                journal=PendingJournal(study_directory(spec.studies_dir, spec.study)),
                before_replay=gate,
                baseline_elsewhere=group.slot > 0,
                **setup.study_hooks(),
            )
            return ran["n"]


# -- the pool ------------------------------------------------------------------------------------
WORKER_COMMAND: tuple[str, ...] = (sys.executable, "-P", "-m", "autotune", "worker")


@dataclass
class _Worker:
    group: GpuGroup
    spec_path: Path
    out_path: Path  # its stdout and stderr (tracebacks); its log is the spec's log_path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    returncode: int | None = None

    def start(self, command: Sequence[str]) -> None:
        with self.out_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [*command, "--spec", str(self.spec_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.returncode = None

    def last_words(self) -> str:
        try:
            lines = [ln for ln in self.out_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""


@dataclass
class ParallelRun:
    """What :func:`run_parallel` leaves: each worker's exit status, and :attr:`evaluator` for the
    confirmation, on the first group's GPUs, leased by this process until :meth:`close` (or exit)."""

    setup: TuningSetup
    directory: Path
    groups: tuple[GpuGroup, ...]
    returncodes: dict[int, int | None] = field(default_factory=dict)  # slot -> last exit status
    restarts: dict[int, int] = field(default_factory=dict)
    _lease: GpuLease | None = None

    @property
    def evaluator(self) -> VllmEvaluator:
        group = self.groups[0]
        if self._lease is None:
            self._lease = GpuLease(group.gpus, owner="confirmation").acquire()
        return for_gpus(self.setup, group, self._lease).evaluator(self.directory)

    def close(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def __enter__(self) -> ParallelRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _report(study: optuna.Study, run_id: str, seen: dict[int, str]) -> list[tuple[str, Any]]:
    """New events of the run since ``seen`` (trial number -> state seen): ("start", trial) and
    ("done", TrialReport), in trial order."""
    events: list[tuple[str, Any]] = []
    best = None
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(RUN_ATTR) != run_id or seen.get(t.number) == "done":
            continue
        if t.state.is_finished():
            if best is None:
                best = best_feasible(study)
            rec = read_record(t)
            seen[t.number] = "done"
            events.append(
                (
                    "done",
                    TrialReport(
                        number=t.number,
                        params=t.params,
                        record=rec,
                        value=t.value if rec.ok else None,
                        feasible=rec.ok and constraints_hold(rec.constraints or (1.0,)),
                        best_number=best.number if best else None,
                        best_value=best.value if best else None,
                    ),
                )
            )
        elif t.number not in seen:
            seen[t.number] = "start"
            events.append(("start", t))
    return events


@dataclass
class _Pool:
    """The workers of one run, watched by :func:`run_parallel`."""

    study: optuna.Study
    run_id: str
    n_trials: int
    timeout_s: float | None
    command: Sequence[str]
    max_restarts: int
    say: Callable[[str], None]
    workers: list[_Worker]
    t0: float = field(default_factory=time.monotonic)

    def watch(self) -> bool:
        """Handle the workers that exited since the last look; True while any runs."""
        alive = False
        for w in self.workers:
            if w.proc is None or w.returncode is not None:
                continue
            if w.proc.poll() is None:
                alive = True
                continue
            w.returncode = w.proc.returncode
            if w.returncode != 0:
                alive |= self._after_crash(w)
        return alive

    def _after_crash(self, w: _Worker) -> bool:
        """A worker exited with an error: restarted (True) unless the run is over or it would fail again."""
        why = f"worker {w.group.slot} ({w.group.describe()}) exited with {w.returncode}: {w.last_words()}"
        finished = count_trials(self.study, self.run_id) >= self.n_trials or (
            self.timeout_s is not None and time.monotonic() - self.t0 >= self.timeout_s
        )
        if finished or w.returncode in (EXIT_BUSY, EXIT_USAGE) or w.restarts >= self.max_restarts:
            self.say(why + ("" if finished else " (not restarted)"))
            return False
        _fail_orphans(self.study, self.run_id, w.group.slot)
        w.restarts += 1
        self.say(why + f"; restarting it ({w.restarts} of {self.max_restarts}): it reclaims its GPUs' lease")
        w.start(self.command)
        return True

    def stop(self, grace_s: float) -> None:
        """SIGTERM every worker (each stops its engine and exits), SIGKILL what is left after
        ``grace_s`` (their engines' guardians then stop the engines)."""
        alive = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in alive:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker pid %d still running %.0f s after SIGTERM: killing it", p.pid, grace_s)
                p.kill()
                p.wait()


def run_parallel(
    setup: TuningSetup,
    study: optuna.Study,
    directory: Path,
    groups: Sequence[GpuGroup],
    *,
    storage: str | None,
    studies_dir: Path,
    n_trials: int,
    timeout_s: float | None = None,
    seed: int = 0,
    say: Callable[[str], None] = log.info,
    on_trial_done: Callable[[TrialReport], None] | None = None,
    worker_command: Sequence[str] = WORKER_COMMAND,
    max_restarts: int = 2,
    poll_s: float = 1.0,
    stop_grace_s: float = 45.0,
) -> ParallelRun:
    """Run ``n_trials`` more trials of ``study`` (opened by the caller: baseline enqueued, reference
    planned) on one worker per group; see the module doc. ``storage``: the user's ``--storage``
    (None: the same default as the caller), so that no password travels in a worker's argv."""
    groups = tuple(groups[: max(1, min(len(groups), n_trials))])
    run = ParallelRun(setup=setup, directory=directory, groups=groups)
    if n_trials <= 0:
        return run
    check_fingerprint(study, setup)
    record_devices(study, groups)
    run_id, since, wdir = uuid.uuid4().hex[:12], time.time(), directory / "workers"
    workers = []
    for g in groups:
        spec = WorkerSpec(
            choices=setup.choices,
            study=study.study_name,
            studies_dir=studies_dir,
            storage=storage,
            group=g,
            seed=seed + g.slot,
            n_trials=n_trials,
            run_id=run_id,
            run_trials=n_trials,
            timeout_s=timeout_s,
            baseline_since=since,
            parent_pid=os.getpid(),
            log_path=wdir / f"worker-{g.slot}.log",
        )
        workers.append(_Worker(g, spec.dump(wdir / f"worker-{g.slot}.json"), wdir / f"worker-{g.slot}.out"))
    where = {g.slot: g.describe() for g in groups}
    say(
        f"{len(workers)} worker(s): "
        + "; ".join(f"worker {k} on {v}" for k, v in where.items())
        + f" ({wdir})"
    )
    pool = _Pool(study, run_id, n_trials, timeout_s, worker_command, max_restarts, say, workers)
    seen: dict[int, str] = {}

    def report(final: bool = False) -> None:
        for kind, item in _report(study, run_id, seen):
            if kind == "start" and not final:
                slot = item.user_attrs.get("worker")
                say(f"trial #{item.number} started: worker {slot} on {where.get(slot, '?')}")
            elif kind == "done" and on_trial_done is not None:
                on_trial_done(item)

    try:
        for w in workers:
            w.start(worker_command)
        while pool.watch():
            report()
            time.sleep(poll_s)
        report(final=True)
    except BaseException:
        pool.stop(stop_grace_s)
        raise
    run.returncodes = {w.group.slot: w.returncode for w in workers}
    run.restarts = {w.group.slot: w.restarts for w in workers}
    if all(w.returncode for w in workers) and not count_trials(study, run_id):
        w = workers[0]
        raise AutotuneError(f"every worker failed; worker 0: {w.last_words()} (its output: {w.out_path})")
    return run


def _fail_orphans(study: optuna.Study, run_id: str, slot: int) -> None:
    """The trials a dead worker was running are failed; a baseline among them is enqueued again
    first, so that the workers waiting for the baseline keep waiting for the new one."""
    running = optuna.trial.TrialState.RUNNING
    orphans = [
        t
        for t in study.get_trials(deepcopy=False, states=(running,))
        if t.user_attrs.get(RUN_ATTR) == run_id and t.user_attrs.get("worker") == slot
    ]
    if any(t.user_attrs.get(BASELINE_ATTR) for t in orphans):
        ensure_baseline(study)
    for t in orphans:
        with contextlib.suppress(ValueError, RuntimeError):  # finished meanwhile
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
