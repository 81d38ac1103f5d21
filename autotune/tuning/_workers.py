"""Parallel workers on one study: one process per GPU (or tensor-parallel group), each with its own
engine, port, log and lease, all sharing the study through its storage.

:func:`run_parallel` is the pool behind ``autotune run --gpus``: it leases nothing itself while the
workers run; it starts one ``autotune worker`` per group, prints their trials as the storage
records them, restarts a worker that crashed (its replacement reclaims the lease), and on Ctrl-C,
SIGTERM or any error stops every worker (each stops its engine). Workers die with the pool: they
ask the kernel for SIGTERM when their parent dies (``PR_SET_PDEATHSIG``), and an engine's guardian
stops the engine when its worker dies. Afterwards the pool leases the first group again, so that
the confirmation re-measures best and baseline on one and the same GPUs.

One worker (``autotune worker``, :func:`~autotune.tuning._worker.run_worker`) is described in
:mod:`autotune.tuning._worker`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
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
from autotune.errors import AutotuneError
from autotune.study import (
    BASELINE_ATTR,
    TrialReport,
    best_feasible,
    constraints_hold,
    ensure_baseline,
    read_record,
)
from autotune.trial import VllmEvaluator
from autotune.tuning._fingerprint import check_fingerprint
from autotune.tuning._gpus import GpuGroup, for_gpus, record_devices
from autotune.tuning._setup import TuningSetup
from autotune.tuning._worker import EXIT_BUSY, EXIT_USAGE, RUN_ATTR, WorkerSpec, count_trials

__all__ = ["WORKER_COMMAND", "ParallelRun", "run_parallel"]

log = logging.getLogger(__name__)

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

    def run(self, progress: Callable[[bool], None], poll_s: float, grace_s: float) -> None:
        """Start every worker and watch them until none runs, saying their trials; on any error
        (Ctrl-C included) stop them all."""
        try:
            for w in self.workers:
                w.start(self.command)
            while self.watch():
                progress(False)
                time.sleep(poll_s)
            progress(True)
        except BaseException:
            self.stop(grace_s)
            raise

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
    common = WorkerSpec(
        choices=setup.choices,
        study=study.study_name,
        studies_dir=studies_dir,
        storage=storage,
        n_trials=n_trials,
        run_id=run_id,
        run_trials=n_trials,
        timeout_s=timeout_s,
        baseline_since=since,
        parent_pid=os.getpid(),
    )  # each worker's: this with its group, seed and log
    workers = [_write_worker(common, g, seed + g.slot, wdir) for g in groups]
    where = {g.slot: g.describe() for g in groups}
    say(
        f"{len(workers)} worker(s): "
        + "; ".join(f"worker {k} on {v}" for k, v in where.items())
        + f" ({wdir})"
    )
    pool = _Pool(study, run_id, n_trials, timeout_s, worker_command, max_restarts, say, workers)
    pool.run(_Progress(study, run_id, where, say, on_trial_done), poll_s, stop_grace_s)
    run.returncodes = {w.group.slot: w.returncode for w in workers}
    run.restarts = {w.group.slot: w.restarts for w in workers}
    if all(w.returncode for w in workers) and not count_trials(study, run_id):
        w = workers[0]
        raise AutotuneError(f"every worker failed; worker 0: {w.last_words()} (its output: {w.out_path})")
    return run


def _write_worker(common: WorkerSpec, g: GpuGroup, seed: int, wdir: Path) -> _Worker:
    """Group ``g``'s worker, its spec written: ``common`` with this group, its seed and its log."""
    spec = dataclasses.replace(common, group=g, seed=seed, log_path=wdir / f"worker-{g.slot}.log")
    return _Worker(g, spec.dump(wdir / f"worker-{g.slot}.json"), wdir / f"worker-{g.slot}.out")


@dataclass
class _Progress:
    """Says each trial of the run as the storage records it: its start (the worker and its GPUs,
    not after the workers have stopped) and its end (to ``on_done``)."""

    study: optuna.Study
    run_id: str
    where: dict[int, str]  # slot -> its GPUs, described
    say: Callable[[str], None]
    on_done: Callable[[TrialReport], None] | None
    seen: dict[int, str] = field(default_factory=dict)

    def __call__(self, final: bool = False) -> None:
        for kind, item in _report(self.study, self.run_id, self.seen):
            if kind == "start" and not final:
                slot = item.user_attrs.get("worker")
                self.say(f"trial #{item.number} started: worker {slot} on {self.where.get(slot, '?')}")
            elif kind == "done" and self.on_done is not None:
                self.on_done(item)


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
