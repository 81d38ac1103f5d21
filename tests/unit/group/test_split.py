"""The split of a shared budget as a search dimension: every sample a split summing to 1, none rejected."""

from __future__ import annotations

import optuna
import pytest

from autotune.space import SearchSpace
from autotune.study import member_params, split_fractions, split_params, suggest_member, suggest_split

NAMES = ("rag", "chat", "coder")


@pytest.mark.parametrize("names", [NAMES[:2], NAMES])
def test_every_sampled_split_sums_to_one_with_no_model_at_nothing(names: tuple[str, ...]) -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(200):
        trial = study.ask()
        split = suggest_split(trial, names)
        study.tell(trial, 0.0)
        assert set(split) == set(names)
        assert sum(split.values()) == pytest.approx(1.0)
        assert min(split.values()) > 0
    assert len(study.trials[0].params) == len(names) - 1  # one parameter fewer than models


def test_a_chosen_split_maps_back_to_the_one_point_that_gives_it() -> None:
    chosen = {"rag": 0.6, "chat": 0.3, "coder": 0.1}
    assert split_fractions(split_params(chosen, NAMES), NAMES) == pytest.approx(chosen)
    # fractions that do not sum to 1 are normalised
    assert split_fractions(split_params({"rag": 3, "chat": 1, "coder": 0}, NAMES), NAMES)[
        "rag"
    ] == pytest.approx(0.75, abs=0.02)


def test_each_models_own_space_is_asked_under_its_name() -> None:
    space = SearchSpace.model_validate(
        {
            "name": "s",
            "platform": "cpu",
            "parameters": {
                "block_size": {"type": "categorical", "choices": [32, 64], "flag": "--block-size"}
            },
        }
    )
    trial = optuna.create_study().ask()
    values = {n: suggest_member(trial, n, space) for n in NAMES[:2]}
    assert set(trial.params) == {"rag.block_size", "chat.block_size"}
    assert member_params(trial.params, "rag") == values["rag"]
