"""Trials whose process is gone. Each trial records its owner (host, pid and the process's start
time) when it starts; a RUNNING trial whose owner no longer exists on this host, or whose
heartbeat is older than the storage's grace (an owner on another host, or one from before owners
were recorded), is failed at once rather than after the grace. A failed trial's configuration is
tried once more (the storage's retry callback), except the baseline: the study's one waiting
baseline is enqueued instead, so a kill during the baseline never yields two (issue 30)."""

from __future__ import annotations

import copy
import logging
import os
import socket
from typing import Any

import optuna
import psutil
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

from autotune.study._baseline import ensure_baseline
from autotune.study._record import BASELINE_ATTR

__all__ = ["OWNER_ATTR", "claim_trial", "fail_orphaned_trials", "owner_gone"]

log = logging.getLogger(__name__)

OWNER_ATTR = "owner"  # trial attr: {"host", "pid", "started"} of the process running it
ORPHAN_ATTR = "orphaned"  # trial attr: why a RUNNING trial was failed by a later process
_State = optuna.trial.TrialState


def _started(pid: int) -> float | None:
    """When process ``pid`` started (None: no such live process; a zombie has finished)."""
    try:
        proc = psutil.Process(pid)
        return None if proc.status() == psutil.STATUS_ZOMBIE else proc.create_time()
    except psutil.AccessDenied:
        return -1.0  # alive, start time unknown
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def claim_trial(trial: optuna.Trial) -> None:
    """Record this process as the owner of ``trial``."""
    pid = os.getpid()
    trial.set_user_attr(OWNER_ATTR, {"host": socket.gethostname(), "pid": pid, "started": _started(pid)})


def owner_gone(owner: Any) -> str | None:
    """Why the process named by ``owner`` is known to be gone (None: alive, or on another host)."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return None
    pid, started = owner.get("pid"), owner.get("started")
    if not isinstance(pid, int):
        return None
    now = _started(pid)
    if now is None:
        return f"its process (pid {pid} on {owner['host']}) is gone"
    if isinstance(started, int | float) and now >= 0 and abs(now - started) > 1.0:
        return f"its process (pid {pid} on {owner['host']}) is gone (the pid is another process's now)"
    return None


def _stale_ids(study: optuna.Study) -> set[int]:
    storage = study._storage
    if not isinstance(storage, BaseHeartbeat) or not is_heartbeat_enabled(storage):
        return set()
    return set(storage._get_stale_trial_ids(study._study_id))


def fail_orphaned_trials(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials whose owner is gone or whose heartbeat went stale (their numbers)."""
    storage = study._storage
    stale = _stale_ids(study)
    failed: list[optuna.trial.FrozenTrial] = []
    for t in study.get_trials(deepcopy=False, states=(_State.RUNNING,)):
        why = owner_gone(t.user_attrs.get(OWNER_ATTR))
        if why is None and t._trial_id in stale:
            why = "its heartbeat stopped longer ago than the storage's grace"
        if why is None:
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, ORPHAN_ATTR, why)
            if storage.set_trial_state_values(t._trial_id, state=_State.FAIL):
                failed.append(t)
                log.warning("trial %d was left running: %s; failed", t.number, why)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
            continue  # finished meanwhile, or failed by another process first
    retry = storage.get_heartbeat_stale_trial_callback() if isinstance(storage, BaseHeartbeat) else None
    for t in failed:
        if t.user_attrs.get(BASELINE_ATTR):
            ensure_baseline(study)  # one waiting baseline, not a retry of each killed one
        elif retry is not None:
            retry(study, copy.deepcopy(storage.get_trial(t._trial_id)))
    return [t.number for t in failed]
