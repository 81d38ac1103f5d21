"""``autotune nightly -f group.yaml``: one night of a group study (several models on one server)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import typer

from autotune.cli._console import console, out
from autotune.errors import EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, ConfigError, PromoteHookError
from autotune.spec import GroupFile, resolve_spec
from autotune.study import resolve_storage_url

__all__ = ["night_group"]


def night_group(group: GroupFile, flags: Mapping[str, Any]) -> None:
    """One night of the group study of ``group`` (see :mod:`autotune.nightly._group_night`).

    Exit codes as one engine's night: 0 kept or promoted, 3 regression, 4 nothing feasible, the
    hook's own code when the promoted group was written and --on-promote failed."""
    from autotune.nightly import GroupNightOptions, process_start, run_group_night
    from autotune.tuning import (
        GROUP_FINGERPRINT_ATTR,
        StudyLock,
        build_group,
        check_study_name,
        prior_split,
        study_directory,
    )

    started = process_start()
    common = resolve_spec("nightly", flags=flags, file=group.common)
    if "incumbent" in flags or common.incumbent is not None:
        raise ConfigError(
            f"--incumbent: {group.path} is a study of several models on one server: its incumbent is the group "
            "the study deployed into --out (fix: drop --incumbent; give the deployed folder as --out)"
        )
    name = check_study_name(common.study or group.path.stem)
    with build_group(group, flags) as setup, StudyLock(common.storage, name, common.studies_dir):
        url = resolve_storage_url(common.storage, name, common.studies_dir)
        sdir = study_directory(common.studies_dir, name)
        sdir.mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(
            study_name=name,
            storage=url,
            direction="minimize",
            sampler=optuna.samplers.TPESampler(seed=common.seed),
            load_if_exists=True,
        )
        if study.get_trials(deepcopy=False) and GROUP_FINGERPRINT_ATTR not in study.user_attrs:
            raise ConfigError(
                f"study {name!r} is a study of one engine, not of this group (fix: another --study name)"
            )
        first = None
        if common.prior:
            prior = prior_split(setup)
            first = prior.split
            for line in prior.lines:
                out.print(f"# {line}", markup=False, soft_wrap=True)
        options = GroupNightOptions(
            budget_s=common.budget_s,
            out=(common.out or sdir / "export").resolve(),
            rounds=common.rounds,
            min_improvement=common.min_improvement,
            max_trials=common.max_trials,
            started=started,
        )
        delivered: list[Any] = []

        def deliver(folder: Path, previous: Path | None, value: float, night: int) -> None:
            if common.on_promote:
                delivered.append(_hook(common, folder, previous, value, night, sdir))

        night = run_group_night(
            setup, study, sdir, options, check_args=common.check_args, first=first,
            say=lambda line: console.print(line, soft_wrap=True, markup=False), on_promote=deliver,
        )  # fmt: skip
    out.print(night.summary(), soft_wrap=True, markup=False)
    for result in delivered:
        if not result.ok:
            raise PromoteHookError(
                f"--on-promote: {result.describe()}; the group in {options.out} is kept (fix: read the hook's "
                "log, then re-run the hook by hand)",
                exit_code=result.shell_code,
            )
    if night.regression:
        raise typer.Exit(EXIT_REGRESSION)
    if night.decision == "nothing_feasible":
        raise typer.Exit(EXIT_NOTHING_FEASIBLE)


def _hook(common: Any, folder: Path, previous: Path | None, value: float, night: int, sdir: Path) -> Any:
    """--on-promote with the promoted group's folder (AUTOTUNE_NEW_CONFIG), the replaced files' folder
    (AUTOTUNE_PREVIOUS_CONFIG) and the group objective against the incumbent."""
    from autotune.nightly import run_on_promote

    result = run_on_promote(
        common.on_promote,
        new_config=folder,
        previous_config=previous,
        figures={"group_objective": value},
        night=str(night),
        timeout_s=common.on_promote_timeout,
        objective="group",
        log_dir=sdir / "promote-logs",
        scrub=[common.api_key_env] if common.api_key_env else [],
    )
    console.print(f"--on-promote: {result.describe()}", markup=False, soft_wrap=True)
    return result
