"""Which group trial is deployed: the study records what it exported (the trial and each file's hash)
so that a night re-measures that group as its incumbent, and knows when a file was changed since."""

from __future__ import annotations

import hashlib
from pathlib import Path

import optuna

from autotune.errors import ConfigError
from autotune.tuning.group._export import GroupExport

__all__ = ["DEPLOYED_ATTR", "deployed_trial", "record_deployed"]

DEPLOYED_ATTR = "group_deployed"  # study attr: {"trial", "folder", "files": {name: sha256}}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_deployed(study: optuna.Study, trial: optuna.trial.FrozenTrial, written: GroupExport) -> None:
    """The group trial ``written`` exports, and its files' hashes, as the study's deployed group."""
    files = {p.name: _sha(p) for p in [*written.configs.values(), written.launch]}
    folder = str(written.launch.parent.resolve())
    study.set_user_attr(DEPLOYED_ATTR, {"trial": trial.number, "folder": folder, "files": files})


def deployed_trial(study: optuna.Study, folder: Path) -> optuna.trial.FrozenTrial | None:
    """The group trial whose export is in ``folder``; None when the study exported none there.
    A file of it changed since is a one-line error: the night would measure something else."""
    rec = study.user_attrs.get(DEPLOYED_ATTR) or {}
    if not rec or Path(rec.get("folder", "")) != folder.resolve():
        return None
    for name, sha in (rec.get("files") or {}).items():
        path = folder / name
        if not path.exists() or _sha(path) != sha:
            what = "is gone" if not path.exists() else "differs from what the study exported"
            raise ConfigError(
                f"{path}: the deployed group's file {what} (trial {rec.get('trial')}): a night re-measures "
                f"the group the study exported, not an edited one (fix: restore it, or export again with "
                f"`autotune run -f GROUP.yaml --study {study.study_name} --n-trials 0 --out {folder}`)"
            )
    number = rec.get("trial")
    return next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
