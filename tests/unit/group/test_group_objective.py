"""The group's objective: each model against its own baseline figure, weighted; folded by ``worst``,
``weighted_sum`` or ``pareto`` (the default: the weighted geometric mean, no model worse beyond the noise)."""

from __future__ import annotations

import pytest

from autotune.study import ModelOutcome, group_score


def test_the_baseline_group_scores_one_and_the_worst_model_decides() -> None:
    base = [ModelOutcome("rag", 100.0, 100.0), ModelOutcome("chat", 50.0, 50.0)]
    assert group_score(base, direction="minimize", mode="worst").value == pytest.approx(1.0)
    # rag 40% faster, chat 10% slower: the group is scored by chat, not by the average
    trade = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 55.0, 50.0)]
    assert group_score(trade, direction="minimize", mode="worst").value == pytest.approx(1.1)
    assert group_score(trade, direction="minimize", mode="weighted_sum").value == pytest.approx(0.85)


def test_a_weight_counts_a_models_gain_or_loss_that_many_times() -> None:
    trade = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 55.0, 50.0, weight=2.0)]
    assert group_score(trade, direction="minimize", mode="worst").value == pytest.approx(1.2)
    assert group_score(trade, direction="minimize", mode="weighted_sum").value == pytest.approx(
        (0.6 + 2 * 1.1) / 3
    )


def test_a_maximised_metric_is_turned_lower_is_better() -> None:
    faster = [ModelOutcome("rag", 200.0, 100.0), ModelOutcome("chat", 100.0, 100.0)]
    score = group_score(faster, direction="maximize", mode="worst")
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


def test_pareto_is_the_weighted_geometric_mean_and_sees_a_one_sided_gain() -> None:
    # the seed's case: rag given the memory it lacked drops to 0.6x, chat beside it holds at 1.0x
    one_sided = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 50.0, 50.0)]
    assert group_score(one_sided, direction="minimize", mode="worst").value == pytest.approx(1.0)  # no gain
    score = group_score(one_sided, direction="minimize")  # pareto, the default
    assert score.feasible and score.value == pytest.approx(0.6**0.5)
    weighted = [ModelOutcome("rag", 60.0, 100.0, weight=3.0), ModelOutcome("chat", 51.0, 50.0)]
    assert group_score(weighted, direction="minimize").value == pytest.approx((0.6**3 * 1.02) ** 0.25)
    # a maximised figure is turned lower-is-better first: throughput 1.25x its baseline is a ratio of 0.8
    tput = [ModelOutcome("rag", 125.0, 100.0), ModelOutcome("chat", 100.0, 100.0)]
    assert group_score(tput, direction="maximize").value == pytest.approx(0.8**0.5)


def test_pareto_makes_a_group_with_a_model_worse_beyond_the_noise_infeasible_by_model_and_figure() -> None:
    trade = [
        ModelOutcome("rag", 60.0, 100.0, metric="ttft_p90"),
        ModelOutcome("chat", 60.0, 50.0, metric="ttft_p90"),
    ]
    score = group_score(trade, direction="minimize", noise=0.03)
    assert not score.feasible and score.value is None and score.worse == ("chat",)
    assert score.reasons == ("infeasible: chat p90 TTFT 1.20x its baseline, beyond the 3% noise floor",)
    assert score.ratios == pytest.approx({"rag": 0.6, "chat": 1.2})  # kept for the record
    # within the floor it counts, at its ratio: 2% worse under a 3% floor
    near = [ModelOutcome("rag", 60.0, 100.0), ModelOutcome("chat", 51.0, 50.0)]
    assert group_score(near, direction="minimize", noise=0.03).value == pytest.approx((0.6 * 1.02) ** 0.5)
    assert not group_score(near, direction="minimize", noise=0.01).feasible
    # a throughput named in its own direction: 0.80x of its baseline
    tput = [ModelOutcome("rag", 200.0, 100.0), ModelOutcome("chat", 80.0, 100.0, metric="output_throughput")]
    assert group_score(tput, direction="maximize").reasons == (
        "infeasible: chat output throughput 0.80x its baseline, beyond the 3% noise floor",
    )
    # its own SLO broken: infeasible under pareto too, whatever the ratios
    slo = [
        ModelOutcome("rag", 60.0, 100.0, violations=("slo:ttft_p90 not met",)),
        ModelOutcome("chat", 50, 50),
    ]
    assert group_score(slo, direction="minimize").reasons == ("rag: slo:ttft_p90 not met",)


def test_a_throughput_below_its_floor_is_kept_apart_from_what_no_re_measurement_overturns() -> None:
    """A confirmation round goes on past a model worse than that round's baseline (the medians of
    every round, against the model's own spread, judge it), never past a failure or a broken SLO."""
    slow = [
        ModelOutcome("rag", 60.0, 100.0, relative=("throughput_vs_baseline not met (91%)",)),
        ModelOutcome("chat", 50.0, 50.0),
    ]
    score = group_score(slow, direction="minimize")
    assert score.reasons == ("rag: throughput_vs_baseline not met (91%)",) and not score.feasible
    assert score.worse == ("rag",) and score.broken == ()
    slo = [
        ModelOutcome("rag", 60.0, 100.0, violations=("slo:ttft_p90 not met",)),
        ModelOutcome("chat", 50, 50),
    ]
    assert group_score(slo, direction="minimize").broken == ("rag: slo:ttft_p90 not met",)
