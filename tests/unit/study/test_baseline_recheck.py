"""The baseline plan is checked again when the baseline runs (issue 30, item 8): when vLLM's defaults no
longer fit (another tenant took memory since the plan), the named reference is measured instead."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.study import REFERENCE_ATTR, Objective, TrialPolicy, load_or_create, read_record, run_study
from tests.unit.study.test_study_resume import SPACE, Evaluator

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _run(tmp_path: Path, answer: dict[str, int] | None) -> tuple[optuna.Study, Evaluator, list[int]]:
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    ev, asked = Evaluator(), []

    def recheck() -> dict[str, int] | None:
        asked.append(1)
        return answer

    run_study(study, TrialPolicy(space=SPACE, objective=Objective(), recheck_baseline=recheck), ev, 2)
    return study, ev, asked


def test_defaults_that_no_longer_fit_are_replaced_by_the_reference_when_the_baseline_runs(
    tmp_path: Path,
) -> None:
    study, ev, asked = _run(tmp_path, {"block_size": 32})
    assert ev.calls[0] == ("--block-size", "32")  # the baseline launched as the reference, not the defaults
    assert study.user_attrs[REFERENCE_ATTR] == {"block_size": 32}  # every later run measures the same
    base = read_record(study.get_trials()[0])
    assert base.ok and base.baseline and asked == [1]


def test_defaults_that_still_fit_run_as_planned(tmp_path: Path) -> None:
    study, ev, asked = _run(tmp_path, None)
    assert ev.calls[0] == () and REFERENCE_ATTR not in study.user_attrs and asked == [1]
