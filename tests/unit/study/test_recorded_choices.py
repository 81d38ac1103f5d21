"""A study resumed with fewer choices for a parameter (the space clipped by new fixed flags) keeps the
choices it recorded: Optuna refuses a categorical parameter whose choices change within a study."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.space import SearchSpace
from autotune.study import Objective, load_or_create, suggest_values
from autotune.study._recorded_choices import with_recorded_choices


def _space(choices: list[int]) -> SearchSpace:
    return SearchSpace.model_validate(
        {
            "name": "s",
            "platform": "cpu",
            "parameters": {
                "kv": {"type": "categorical", "choices": choices, "flag": "--kv-cache-memory-bytes"},
                "seqs": {"type": "categorical", "choices": [16, 32], "flag": "--max-num-seqs"},
            },
        }
    )


def test_a_clipped_parameter_keeps_the_studys_recorded_choices(tmp_path: Path) -> None:
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    first = study.ask()
    suggest_values(first, _space([8, 16, 64, 128]))
    study.tell(first, 1.0)
    clipped = _space([64, 128])
    with pytest.raises(ValueError, match="dynamic value space"):  # what a resumed study hit before
        suggest_values(study.ask(), clipped)
    kept = with_recorded_choices(study, clipped)
    assert kept.parameters["kv"].choices == (8, 16, 64, 128)
    assert kept.parameters["seqs"].choices == (16, 32)
    values = suggest_values(study.ask(), kept)
    assert values["kv"] in (8, 16, 64, 128)
    assert with_recorded_choices(optuna.create_study(), clipped) == clipped  # a new study: the run's space
