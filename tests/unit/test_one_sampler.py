"""One sampler for every study (issue 46: the group opened its study with ``TPESampler(seed)``, the
single engine with 4 random trials first and a multivariate TPE): a group study and a single-engine
study now ask the same sampler."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.study import Objective, load_or_create
from autotune.studyfile import StudySpec
from autotune.usecases._group_open import open_group_study


def _settings(study: optuna.Study) -> tuple[type, int, bool]:
    s = study.sampler
    assert isinstance(s, optuna.samplers.TPESampler)
    return type(s), s._n_startup_trials, s._multivariate


def test_a_group_study_and_a_single_engine_study_share_the_sampler(tmp_path: Path) -> None:
    group, _, _ = open_group_study(StudySpec(studies_dir=tmp_path, seed=3), "g")
    single = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(metric="ttft_p90"), 3)
    assert _settings(group) == _settings(single) == (optuna.samplers.TPESampler, 4, True)
