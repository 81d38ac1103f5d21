"""Repeated passes: how many, how they combine, what a leaking reset looks like."""

from __future__ import annotations

import math

import pytest

from autotune.bench import TrialFigures
from autotune.errors import ConfigError
from autotune.trial import (
    MAX_AUTO_PASSES,
    PassPlan,
    combine_passes,
    parse_passes,
    reset_leak,
    spread,
)


def _figs(
    p90: float, tput: float, completed: int = 10, failed: int = 0, behind: bool = False
) -> TrialFigures:
    return TrialFigures(
        completed=completed,
        failed=failed,
        duration_s=2.0,
        request_throughput=tput / 10,
        output_throughput=tput,
        total_output_tokens=completed * 4,
        percentiles_ms={"ttft_p90": p90, "ttft_p50": p90 / 2},
        mean_ms={"ttft": p90 / 1.5},
        goodput=None,
        lag_p99_ms=5.0 if not behind else 500.0,
        behind_schedule=behind,
        schedule_note="lag p99 500 ms" if behind else "",
        failures={"HTTP 400: too long": failed} if failed else {},
    )


def test_the_trial_figure_is_the_median_of_its_passes_and_counts_add_up() -> None:
    out = combine_passes([_figs(100.0, 50.0), _figs(300.0, 40.0, failed=1), _figs(110.0, 45.0, behind=True)])
    assert out.percentiles_ms["ttft_p90"] == 110.0  # one slow pass does not move the median
    assert out.percentiles_ms["ttft_p50"] == 55.0
    assert out.output_throughput == 45.0
    assert out.completed == 30 and out.failed == 1 and out.total_output_tokens == 120
    assert out.failures == {"HTTP 400: too long": 1}
    assert out.behind_schedule and out.lag_p99_ms == 500.0 and out.schedule_note


def test_one_pass_is_returned_unchanged() -> None:
    f = _figs(100.0, 50.0)
    assert combine_passes([f]) is f


@pytest.mark.parametrize(
    ("startup", "warmup", "first", "expected"),
    [
        (30.0, 1.0, 10.0, 3),  # 0.5 x 41 s = 20.5 s of extra passes: 2 more
        (60.0, 2.0, 60.0, 2),  # a long replay: one more pass within half a trial
        (5.0, 0.0, 100.0, 1),  # the replay dominates: repeating it would double the trial
        (300.0, 0.0, 1.0, MAX_AUTO_PASSES),  # cheap replays behind a slow start: capped
    ],
)
def test_auto_passes_cost_at_most_half_a_one_pass_trial(
    startup: float, warmup: float, first: float, expected: int
) -> None:
    n = PassPlan().passes_after_first(startup, warmup, first)
    assert n == expected
    if n < MAX_AUTO_PASSES:
        assert startup + warmup + n * first <= 1.5 * (startup + warmup + first) + 1e-9


def test_a_fixed_count_is_kept_and_bad_values_are_one_line_errors() -> None:
    assert parse_passes("3").passes_after_first(1.0, 0.0, 100.0) == 3
    assert parse_passes("auto").count is None and parse_passes("AUTO").repeated
    assert not parse_passes("1").repeated
    for bad in ("0", "x", "21", "-2"):
        with pytest.raises(ConfigError, match="--passes"):
            parse_passes(bad)


def test_a_later_pass_hitting_much_more_than_the_first_is_called_a_leak() -> None:
    assert reset_leak([{"prefix_hit_rate": 0.5}, {"prefix_hit_rate": 0.55}]) is None
    why = reset_leak([{"prefix_hit_rate": 0.5}, {"prefix_hit_rate": 0.52}, {"prefix_hit_rate": 0.95}])
    assert why is not None and why.startswith("pass 3 hit 95.0%")
    assert reset_leak([{"ttft_p90": 1.0}, {"ttft_p90": 2.0}]) is None  # no hit figures: nothing to say


def test_spread_is_range_over_median() -> None:
    assert spread([100.0, 110.0, 90.0]) == pytest.approx(0.2)
    assert spread([100.0]) is None and spread([100.0, math.nan]) is None
