from __future__ import annotations

from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.study import Objective, parse_slo


def _named(objective: Objective, values: list[float]) -> dict[str, float]:
    names = objective.constraint_names()
    assert len(names) == len(values)
    return dict(zip(names, values, strict=True))


def _figures(
    *, tput: float = 100.0, failed: int = 0, ttft_p90: float = 500.0, tpot_mean: float = 20.0
) -> dict[str, Any]:
    return {
        "output_throughput": tput,
        "failed": failed,
        "percentiles_ms": {"ttft_p90": ttft_p90},
        "mean_ms": {"tpot": tpot_mean},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft_p90=800ms", ("ttft_p90", 800.0)),
        ("ttft_p90=800", ("ttft_p90", 800.0)),
        ("e2el_p99=2.5s", ("e2el_p99", 2500.0)),
        (" tpot_mean = 40ms ", ("tpot_mean", 40.0)),
        ("itl_p50=0.05s", ("itl_p50", 50.0)),
    ],
)
def test_slo_is_read_in_milliseconds(text: str, expected: tuple[str, float]) -> None:
    name, value = parse_slo(text)
    assert name == expected[0]
    assert value == pytest.approx(expected[1])


@pytest.mark.parametrize("text", ["ttft_p90<800ms", "ttft_p90=fast", "ttft_p90=800us", "=800ms", ""])
def test_unreadable_slo_says_how_to_write_it(text: str) -> None:
    with pytest.raises(ConfigError, match="METRIC=VALUEms"):
        parse_slo(text)


def test_slo_on_an_unknown_metric_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown metric 'ttft_p42'.*_p90"):
        parse_slo("ttft_p42=800ms")


def test_slo_on_a_rate_is_refused() -> None:
    with pytest.raises(ConfigError, match="rate, not a latency"):
        parse_slo("output_throughput=100")


@pytest.mark.parametrize(
    ("metric", "direction"),
    [("ttft_p90", "minimize"), ("e2el_mean", "minimize"), ("output_throughput", "maximize")],
)
def test_latencies_are_minimised_throughputs_maximised(metric: str, direction: str) -> None:
    objective = Objective(metric=metric)
    assert objective.direction == direction
    assert not hasattr(objective, "penalty")  # no sentinel value: unmeasured trials have none (PRUNED)


def test_unknown_objective_metric_is_refused() -> None:
    with pytest.raises(ConfigError, match="--objective"):
        Objective(metric="latency")


def test_goodput_objective_needs_an_slo() -> None:
    with pytest.raises(ConfigError, match="--slo"):
        Objective(metric="goodput")


def test_goodput_objective_with_only_an_itl_slo_is_refused_up_front() -> None:
    with pytest.raises(ConfigError):
        Objective(metric="goodput", slos_ms={"itl_p90": 50.0})


def test_request_slos_keep_the_strictest_limit_per_kind_for_goodput() -> None:
    objective = Objective(slos_ms={"ttft_p90": 800.0, "ttft_p99": 500.0, "tpot_mean": 40.0, "itl_p90": 30.0})
    assert objective.request_slos == {"ttft": 500.0, "tpot": 40.0}


def test_every_constraint_value_has_a_name_one_per_slo() -> None:
    objective = Objective(slos_ms={"ttft_p90": 800.0, "tpot_mean": 40.0})
    named = _named(objective, objective.constraints(_figures(), 100.0))
    assert {"throughput_vs_baseline", "failed_requests", "slo:ttft_p90", "slo:tpot_mean"} <= set(named)
    assert Objective.is_feasible(list(named.values()))


def test_throughput_below_the_ratio_of_the_baseline_violates_the_constraint() -> None:
    objective = Objective(min_throughput_ratio=0.95)
    below = objective.constraints(_figures(tput=90.0), baseline_throughput=100.0)
    above = objective.constraints(_figures(tput=96.0), baseline_throughput=100.0)
    assert _named(objective, below)["throughput_vs_baseline"] == pytest.approx(0.05)
    assert _named(objective, above)["throughput_vs_baseline"] == pytest.approx(-0.01)
    assert not Objective.is_feasible(below)
    assert Objective.is_feasible(above)


def test_without_a_measured_baseline_throughput_is_not_constrained() -> None:
    objective = Objective()
    values = objective.constraints(_figures(tput=1.0), baseline_throughput=None)
    assert _named(objective, values)["throughput_vs_baseline"] <= 0
    assert Objective.is_feasible(values)


def test_failed_requests_beyond_the_allowance_violate() -> None:
    assert not Objective.is_feasible(Objective().constraints(_figures(failed=1), 100.0))
    assert Objective.is_feasible(Objective(max_failed_requests=1).constraints(_figures(failed=1), 100.0))


def test_slo_violation_is_relative_to_the_limit() -> None:
    objective = Objective(slos_ms={"ttft_p90": 400.0, "tpot_mean": 25.0})
    values = objective.constraints(_figures(ttft_p90=500.0, tpot_mean=20.0), 100.0)
    named = _named(objective, values)
    assert named["slo:ttft_p90"] == pytest.approx(0.25)  # 500 ms against 400 ms
    assert named["slo:tpot_mean"] == pytest.approx(-0.2)  # 20 ms against 25 ms
    assert not Objective.is_feasible(values)


def test_an_slo_that_could_not_be_measured_is_violated() -> None:
    objective = Objective(slos_ms={"ttft_p90": 400.0})
    values = objective.constraints(_figures(ttft_p90=float("nan")), 100.0)
    assert _named(objective, values)["slo:ttft_p90"] > 0


def test_an_infeasible_or_unmeasured_trial_violates_every_constraint() -> None:
    objective = Objective(slos_ms={"ttft_p90": 400.0})
    assert all(v > 0 for v in objective.constraints(_figures(), 100.0, feasible=False))
    assert all(v > 0 for v in _named(objective, objective.constraints(None, 100.0)).values())
