"""Measurements that could not reach the study storage (a full disk, a locked database, a server
gone) are kept in a local journal, one JSON file per trial, and added to the study on the next
run, so a measured trial is never lost to a storage fault."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["PendingJournal", "storage_fault"]

log = logging.getLogger(__name__)


def storage_fault(exc: BaseException) -> str | None:
    """The storage's own first line when ``exc`` (or what it was raised from) is a storage failure."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, SQLAlchemyError | sqlite3.Error):
            orig = getattr(cur, "orig", None) or cur
            text = str(orig).strip().splitlines()
            return text[0] if text else type(orig).__name__
        cur = cur.__cause__ or cur.__context__
    return None


class PendingJournal:
    """``directory/pending-trials/trial-N.json`` while trial N is not safely in the storage."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory) / "pending-trials"

    def _path(self, number: int) -> Path:
        return self.directory / f"trial-{number:04d}.json"

    def save(
        self,
        trial: optuna.Trial,
        value: float | None,
        user_attrs: Mapping[str, Any],
        constraints: Mapping[str, float],
    ) -> None:
        entry = {
            "number": trial.number,
            "params": trial.params,
            "distributions": {
                k: optuna.distributions.distribution_to_json(d) for k, d in trial.distributions.items()
            },
            "value": value,
            "user_attrs": dict(user_attrs),
            "constraints": dict(constraints),
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".pending.")
        with os.fdopen(fd, "w") as fh:
            json.dump(entry, fh)
        os.replace(tmp, self._path(trial.number))

    def discard(self, number: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(number).unlink()

    def pending(self) -> list[Path]:
        return sorted(self.directory.glob("trial-*.json")) if self.directory.is_dir() else []

    def replay(self, study: optuna.Study) -> int:
        """Add every pending outcome to ``study`` as a finished trial (number: the next free)."""
        added = 0
        for path in self.pending():
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                log.warning("unreadable pending trial %s left in place", path)
                continue
            dists = {
                k: optuna.distributions.json_to_distribution(v) for k, v in entry["distributions"].items()
            }
            attrs = {**entry["user_attrs"], "recovered_from_trial": entry["number"]}
            unmeasured = entry["value"] is None  # kept as the runner tells such a trial: PRUNED
            study.add_trial(
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.PRUNED if unmeasured else optuna.trial.TrialState.COMPLETE,
                    value=entry["value"],
                    params=entry["params"],
                    distributions=dists,
                    user_attrs=attrs,
                    constraints=entry["constraints"] or None,
                    system_attrs={"constraints": list((entry["constraints"] or {}).values())},
                )
            )
            path.unlink()
            added += 1
        return added
