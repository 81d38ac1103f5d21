"""The metric registry: one entry per figure says its direction, unit, label, source and lists."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.errors import ConfigError
from autotune.metrics import (
    COMPARED,
    COSTS,
    METRICS,
    REPORTED,
    Source,
    figure_text,
    figure_value,
    latency_figures,
    maximized,
    rate_figures,
    shown_in,
    unit,
)
from autotune.study import Objective


def test_latencies_are_minimised_in_ms_and_rates_maximised() -> None:
    for m in METRICS.values():
        if m.source is Source.LATENCY:
            assert (m.direction, m.unit, m.label) == ("minimize", "ms", f"{m.series.upper()} {m.stat}")
        else:
            assert m.maximize and maximized(m.name)
    assert not maximized("ttft_p90") and not maximized("no_such_figure")
    assert unit("no_such_figure") == "ms"  # a name the registry does not know prints as before


def test_each_list_shows_its_figures_in_registry_order() -> None:
    assert shown_in(COSTS) == (
        "ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "itl_p50", "itl_p90", "e2el_p50", "output_throughput",
    )  # fmt: skip
    assert shown_in(REPORTED) == (
        "ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "itl_p90", "e2el_p90", "output_throughput",
        "goodput",
    )  # fmt: skip
    assert shown_in(COMPARED, sources=(Source.ENGINE,)) == ("prefix_hit_rate", "host_hit_rate")


def test_an_unknown_objective_names_every_registered_one() -> None:
    with pytest.raises(ConfigError) as e:
        Objective(metric="ttft_p42")
    assert str(e.value) == (
        "--objective: unknown metric 'ttft_p42' (fix: use ttft|tpot|itl|e2el with "
        "_p50/_p75/_p90/_p95/_p99/_mean, or output_throughput, request_throughput, goodput, capacity)"
    )
    with pytest.raises(ConfigError, match="unknown metric 'prefix_hit_rate'"):
        Objective(metric="prefix_hit_rate")  # an engine counter is shown, never optimised


def test_a_figure_that_needs_an_slo_says_which() -> None:
    with pytest.raises(ConfigError, match="goodput needs a per-request --slo"):
        Objective(metric="goodput", slos_ms={"itl_p90": 50.0})
    with pytest.raises(ConfigError, match="capacity needs at least one --slo"):
        Objective(metric="capacity")
    assert Objective(metric="capacity", slos_ms={"itl_p90": 50.0}).is_capacity
    assert Objective(metric="goodput", slos_ms={"e2el_p90": 900.0, "e2el_p50": 800.0}).request_slos == {
        "e2el": 800.0
    }


def test_latency_figures_are_percentiles_and_means_in_ms() -> None:
    series = {"ttft": [0.1, 0.2, 0.3], "tpot": [0.01], "itl": [], "e2el": [1.0, 2.0]}
    pct, mean = latency_figures(series)
    assert list(pct)[:6] == ["ttft_p50", "ttft_p75", "ttft_p90", "ttft_p95", "ttft_p99", "tpot_p50"]
    assert pct["ttft_p90"] == pytest.approx(float(np.percentile([100.0, 200.0, 300.0], 90)))
    assert math.isnan(pct["itl_p50"]) and math.isnan(mean["itl"])
    assert mean == pytest.approx({"ttft": 200.0, "tpot": 10.0, "itl": math.nan, "e2el": 1500.0}, nan_ok=True)


def test_rates_are_counts_over_the_duration_and_goodput_needs_its_count() -> None:
    rates = rate_figures({"completed": 10, "output_tokens": 500, "good": None}, 2.0)
    assert rates == {"output_throughput": 250.0, "request_throughput": 5.0, "goodput": None}
    assert rate_figures({"completed": 0, "output_tokens": 0, "good": 0}, 2.0)["goodput"] == 0.0


def test_any_figure_is_found_by_name_in_stored_figures() -> None:
    raw = {"percentiles_ms": {"ttft_p90": 12.5}, "mean_ms": {"tpot": 3.0}, "completed": 4, "saturated": True}
    assert figure_value(raw, "ttft_p90") == 12.5
    assert figure_value(raw, "tpot_mean") == 3.0
    assert figure_value(raw, "completed") == 4.0
    for missing in ("saturated", "ttft_p50", "goodput"):
        with pytest.raises(KeyError):
            figure_value(raw, missing)


def test_figure_text_carries_the_unit_and_never_an_exponent() -> None:
    assert figure_text(200300.0, "ttft_p90") == "200.3 s"
    assert figure_text(1234.5, "output_throughput") == "1234.5 tok/s"
    assert figure_text(3.25, "capacity") == "3.25 req/s"
    assert figure_text(12.5, "request_throughput") == "12.5 req/s"  # requests, not tokens (was tok/s)
    assert figure_text(None, "goodput") == "-"
