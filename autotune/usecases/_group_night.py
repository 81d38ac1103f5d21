"""``nightly`` for a group file: one night of the group study (see :mod:`autotune.nightly._group_night`),
the same night, record and exit codes as one engine's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.errors import ConfigError
from autotune.studyfile import GroupFile, resolve_spec
from autotune.usecases._group_open import announce_prior, open_group_study
from autotune.usecases._night import NightOutcome, finish_night
from autotune.usecases._reporter import Reporter

__all__ = ["night_group"]


def night_group(group: GroupFile, flags: Mapping[str, Any], reporter: Reporter) -> NightOutcome:
    """One night of the group study of ``group``: the deployed group in ``--out`` against tonight's
    baseline group, a search, and a promotion of all models or none; then the hook and the exit code."""
    from autotune.nightly import NightOptions, group_night, process_start, run_night
    from autotune.tuning import GROUP_FINGERPRINT_ATTR, StudyLock, build_group, check_study_name

    started = process_start()
    common = resolve_spec("nightly", flags=flags, file=group.common)
    if "incumbent" in flags or common.incumbent is not None:
        raise ConfigError(
            f"--incumbent: {group.path} is a study of several models on one server: its incumbent is the group "
            "the study deployed into --out (fix: drop --incumbent; give the deployed folder as --out)"
        )
    name = check_study_name(common.study or group.path.stem)

    def say(line: str) -> None:
        reporter.say(line, soft_wrap=True, markup=False)

    with build_group(group, flags) as setup, StudyLock(common.storage, name, common.studies_dir):
        study, sdir, _ = open_group_study(common, name)
        if study.get_trials(deepcopy=False) and GROUP_FINGERPRINT_ATTR not in study.user_attrs:
            raise ConfigError(
                f"study {name!r} is a study of one engine, not of this group (fix: another --study name)"
            )
        first = announce_prior(setup, common.prior, reporter)
        options = NightOptions(
            budget_s=common.budget_s,
            out=(common.out or sdir / "export").resolve(),
            rounds=common.rounds,
            min_improvement=common.min_improvement,
            max_trials=common.max_trials,
            started=started,
        )
        steps = group_night(setup, study, sdir, options, check_args=common.check_args, first=first, say=say)
        record = run_night(steps, study)
    reporter.show(record.summary(), soft_wrap=True, markup=False)
    code = finish_night(record, common, options.out, sdir, reporter)
    return NightOutcome(record, options.out, code)
