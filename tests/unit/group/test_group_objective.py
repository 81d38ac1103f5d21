"""The group's objective: each model against its own baseline figure, weighted; the worst model by default."""

from __future__ import annotations

import pytest

from autotune.study import ModelOutcome, group_score


def test_the_baseline_group_scores_one_and_the_worst_model_decides() -> None:
    base = [ModelOutcome("rag", 100.0, 100.0), ModelOutcome("chat", 50.0, 50.0)]
    assert group_score(base, direction="minimize").value == pytest.approx(1.0)
    # rag 40% faster, chat 10% slower: the group is scored by chat, not by the average
    trade = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 55.0, 50.0)]
    assert group_score(trade, direction="minimize").value == pytest.approx(1.1)
    assert group_score(trade, direction="minimize", mode="weighted_sum").value == pytest.approx(0.85)


def test_a_weight_counts_a_models_gain_or_loss_that_many_times() -> None:
    trade = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 55.0, 50.0, weight=2.0)]
    assert group_score(trade, direction="minimize").value == pytest.approx(1.2)
    assert group_score(trade, direction="minimize", mode="weighted_sum").value == pytest.approx(
        (0.6 + 2 * 1.1) / 3
    )


def test_a_maximised_metric_is_turned_lower_is_better() -> None:
    faster = [ModelOutcome("rag", 200.0, 100.0), ModelOutcome("chat", 100.0, 100.0)]
    score = group_score(faster, direction="maximize")
    assert score.ratios == {"rag": 0.5, "chat": 1.0} and score.value == pytest.approx(1.0)


def test_one_model_failing_or_breaking_its_constraints_makes_the_group_infeasible_by_name() -> None:
    failed = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", None, 50.0, failure="oom: KV cache")]
    score = group_score(failed, direction="minimize")
    assert not score.feasible and score.reasons == ("chat: oom: KV cache",)
    slow = [
        ModelOutcome("rag", 60.0, 100.0, violations=("ttft_p90 2.4 s > 2 s",)),
        ModelOutcome("chat", 50.0, 50.0),
    ]
    assert group_score(slow, direction="minimize").reasons == ("rag: ttft_p90 2.4 s > 2 s",)
