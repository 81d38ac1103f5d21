"""After a promotion: the user's hook, and the history of promoted configs that makes rollback possible.

``run_on_promote`` runs ``--on-promote`` (a shell string, ``/bin/sh -c``) once the new export has
been written atomically. What the hook needs travels in its environment, never in argv:

    AUTOTUNE_NEW_CONFIG        the export just written (e.g. /var/lib/autotune/export/best.yaml)
    AUTOTUNE_PREVIOUS_CONFIG   the config promoted before it (empty: the first promotion)
    AUTOTUNE_NIGHT             the night's label (its number)
    AUTOTUNE_OBJECTIVE         the objective's name (e.g. ttft_p90), when given
    AUTOTUNE_<FIGURE>          each of the night's figures, e.g. AUTOTUNE_BEST_VALUE, AUTOTUNE_BASELINE_VALUE
    AUTOTUNE_FIGURES           all the figures as one JSON object (for a webhook body)

The rest of the tuner's environment passes through (a GitOps hook may need a token of its own,
``KUBECONFIG``, ``GIT_SSH_COMMAND``...), minus the tuner's own secrets: ``AUTOTUNE_STORAGE`` and
``PGPASSWORD`` (and their ``*_FILE`` forms) and any name in ``scrub`` (the vLLM API key's
variable). The hook runs in a process group of its own, with no stdin; its output goes to a log
file; at ``timeout_s`` its whole group gets SIGTERM, then SIGKILL. A failed hook never touches
the export: the caller exits with :attr:`PromoteResult.shell_code`, the hook's own code as a
shell reports it.

``keep_promoted`` archives each promoted config (timestamped, written atomically) and
``rollback`` puts the previous one back into the export path (atomically), withdrawing the
current one to ``<archive>/withdrawn/``; rolling back twice goes two promotions back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import ConfigError, ExportError
from autotune.export import write_atomically

__all__ = [
    "SCRUBBED_ENV",
    "PromoteResult",
    "keep_promoted",
    "promoted_history",
    "rollback",
    "run_on_promote",
]

logger = logging.getLogger(__name__)

SCRUBBED_ENV = ("AUTOTUNE_STORAGE", "AUTOTUNE_STORAGE_FILE", "PGPASSWORD", "PGPASSWORD_FILE")
"""The tuner's own secrets: never in the hook's environment."""

_RESERVED = {"NEW_CONFIG", "PREVIOUS_CONFIG", "NIGHT", "OBJECTIVE", "FIGURES", "STORAGE", "STORAGE_FILE"}
_FIGURE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_KILL_GRACE_S = 5.0
_TAIL_CHARS = 2000


@dataclass(frozen=True)
class PromoteResult:
    """What the hook did. ``exit_code`` is negative (-signal) when it was killed."""

    exit_code: int
    duration_s: float
    log_path: Path
    timed_out: bool
    log_tail: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def shell_code(self) -> int:
        """The hook's exit status as a shell gives it (``$?``): its code, 128+N when signal N ended
        it (a timeout: 143 or 137), 124 for a hook that exited 0 only after its timeout's SIGTERM
        (as ``timeout(1)``); 0 when it succeeded."""
        if self.exit_code < 0:
            return 128 - self.exit_code
        if self.exit_code == 0 and self.timed_out:
            return 124
        return self.exit_code

    def describe(self) -> str:
        """One line for the night's summary."""
        if self.timed_out:
            what = f"was killed at its timeout after {self.duration_s:.1f} s"
        elif self.exit_code == 0:
            what = f"succeeded in {self.duration_s:.1f} s"
        else:
            what = f"exited with code {self.exit_code} after {self.duration_s:.1f} s"
        return f"on-promote hook {what} (log: {self.log_path})"


def _hook_env(
    *,
    new_config: Path,
    previous_config: Path | None,
    figures: Mapping[str, float],
    night: str,
    objective: str | None,
    scrub: Collection[str],
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV and k not in scrub}
    env["AUTOTUNE_NEW_CONFIG"] = str(Path(new_config).resolve())
    env["AUTOTUNE_PREVIOUS_CONFIG"] = str(Path(previous_config).resolve()) if previous_config else ""
    env["AUTOTUNE_NIGHT"] = str(night)
    if objective:
        env["AUTOTUNE_OBJECTIVE"] = objective
    for name, value in figures.items():
        if not _FIGURE_NAME.match(name) or name.upper() in _RESERVED:
            raise ConfigError(
                f"on-promote: figure name {name!r} cannot be an environment variable "
                f"(fix: lower-case letters, digits and _, not one of {sorted(n.lower() for n in _RESERVED)})"
            )
        env[f"AUTOTUNE_{name.upper()}"] = repr(float(value))
    # Strict JSON for a webhook body: a figure that is not a number (nan, inf) is null.
    as_json = {k: float(v) if math.isfinite(float(v)) else None for k, v in figures.items()}
    env["AUTOTUNE_FIGURES"] = json.dumps(as_json, sort_keys=True, allow_nan=False)
    return env


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _tail(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(fh.tell() - _TAIL_CHARS, 0))
        return fh.read().decode("utf-8", "replace")


def run_on_promote(
    command: str,
    *,
    new_config: Path,
    previous_config: Path | None,
    figures: Mapping[str, float],
    night: str,
    timeout_s: float,
    objective: str | None = None,
    log_dir: Path | None = None,
    scrub: Collection[str] = (),
) -> PromoteResult:
    """Run the hook; its output goes to ``log_dir`` (default: ``promote-logs/`` beside the export)."""
    if not command.strip():
        raise ConfigError(
            "on_promote: the command is empty (fix: a shell command, e.g. 'sh /hooks/commit.sh')"
        )
    if timeout_s <= 0:
        raise ConfigError(f"on-promote timeout: {timeout_s!r} s is no time at all (fix: e.g. 300)")
    env = _hook_env(
        new_config=new_config,
        previous_config=previous_config,
        figures=figures,
        night=night,
        objective=objective,
        scrub=scrub,
    )
    logs = Path(log_dir) if log_dir is not None else Path(new_config).parent / "promote-logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = logs / f"on-promote.night{night}.{stamp}.log"
    start = time.monotonic()
    code, timed_out = _run_hook(command, env, log_path, timeout_s)
    duration = time.monotonic() - start
    result = PromoteResult(
        exit_code=code, duration_s=duration, log_path=log_path, timed_out=timed_out, log_tail=_tail(log_path)
    )
    (logger.info if result.ok else logger.warning)("%s", result.describe())
    return result


def _run_hook(command: str, env: Mapping[str, str], log_path: Path, timeout_s: float) -> tuple[int, bool]:
    """Run ``command`` in a process group of its own, its output to ``log_path``; (its exit code,
    whether it timed out). At ``timeout_s`` the group gets SIGTERM, then SIGKILL; whatever the hook
    left running in its group ends with it."""
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: a timeout kills everything it started
        )
        try:
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid, signal.SIGTERM)
                try:
                    code = proc.wait(timeout=_KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    _kill_group(proc.pid, signal.SIGKILL)
                    code = proc.wait()
        finally:
            # Whatever the hook left running in its group (or a Ctrl-C here) ends with it.
            _kill_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
    return code, timed_out


# --- the history of promoted configs --------------------------------------------------------------


def _archive_name(export_path: Path, archive_dir: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = archive_dir / f"{export_path.stem}.{stamp}{export_path.suffix}"
    n = 1
    while target.exists():  # two promotions in one microsecond (tests): keep both, in order
        target = archive_dir / f"{export_path.stem}.{stamp}-{n:03d}{export_path.suffix}"
        n += 1
    return target


def promoted_history(export_path: Path, archive_dir: Path) -> list[Path]:
    """The archived promotions of this export, oldest first (the names sort by time)."""
    export_path = Path(export_path)
    pattern = re.compile(
        rf"^{re.escape(export_path.stem)}\.\d{{8}}T\d{{6}}\.\d{{6}}Z(-\d{{3}})?{re.escape(export_path.suffix)}$"
    )
    if not Path(archive_dir).is_dir():
        return []
    return sorted(p for p in Path(archive_dir).iterdir() if p.is_file() and pattern.match(p.name))


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ExportError(f"{path}: cannot read the {what}: {exc.strerror}") from exc


def keep_promoted(export_path: Path, archive_dir: Path) -> Path:
    """Archive the config now at ``export_path`` (a copy, timestamped, written atomically)."""
    export_path, archive_dir = Path(export_path), Path(archive_dir)
    data = _read(export_path, "promoted config")
    target = _archive_name(export_path, archive_dir)
    try:
        write_atomically(target, data)
    except OSError as exc:
        raise ExportError(f"{archive_dir}: cannot archive the promoted config: {exc.strerror}") from exc
    return target


def rollback(export_path: Path, archive_dir: Path) -> tuple[Path, Path]:
    """Put the previous promoted config back at ``export_path``; (restored from, current withdrawn to).

    The config at ``export_path`` is withdrawn to ``<archive_dir>/withdrawn/`` (so nothing is
    lost). When it is the newest archived one, the one before it is restored; when it is not
    (edited by hand, or written before the archive existed), the newest archived one is.
    """
    export_path, archive_dir = Path(export_path), Path(archive_dir)
    history = promoted_history(export_path, archive_dir)
    current = _read(export_path, "exported config") if export_path.exists() else None
    newest_is_current = bool(history) and current is not None and history[-1].read_bytes() == current
    candidates = history[:-1] if newest_is_current else history
    if not candidates:
        raise ExportError(
            f"{archive_dir}: no earlier promoted config of {export_path.name} to roll back to "
            f"({len(history)} archived; fix: roll back by hand, or let a night promote one first)"
        )
    restore = candidates[-1]
    withdrawn_dir = archive_dir / "withdrawn"
    withdrawn = _archive_name(export_path, withdrawn_dir)
    try:
        if newest_is_current:
            withdrawn_dir.mkdir(parents=True, exist_ok=True)
            os.replace(history[-1], withdrawn)
        elif current is not None:
            write_atomically(withdrawn, current)
        write_atomically(export_path, restore.read_bytes())
    except OSError as exc:
        raise ExportError(f"{export_path}: cannot roll back: {exc.strerror}") from exc
    logger.info("rolled back %s to %s (withdrawn: %s)", export_path, restore.name, withdrawn)
    return restore, withdrawn
