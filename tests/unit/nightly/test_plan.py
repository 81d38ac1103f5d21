"""The night's plan and clock: the start-up counted once, rounds shrunk before the search is
skipped, the smallest budget named; the noise band from what was measured, never a made-up 0%."""

from __future__ import annotations

import pytest

from autotune.nightly._plan import _Clock, make_plan
from autotune.nightly._verdict import noise_band, regression
from autotune.study import Figures, TrialRecord, TrialStatus


def _run(ttft: float, *, passes: tuple[float, ...] = (), **timings: float) -> TrialRecord:
    return TrialRecord(
        status=TrialStatus.OK,
        figures=Figures({"percentiles_ms": {"ttft_p50": ttft}, "completed": 10}),
        passes=tuple({"ttft_p50": v} for v in passes),
        timings_s=timings,
    )


def test_a_run_costs_its_start_up_once_not_its_start_up_plus_its_parts() -> None:
    # The demo's trial 0: 75.8 s of start-up, of which vLLM's log names parts; the old clock
    # summed them all and counted 144.7 s for 75.8 s of real start-up.
    rec = _run(
        10.0,
        startup=75.8,
        startup_load=20.1,
        startup_compile=30.4,
        startup_kv_cache=18.4,
        warmup=3.0,
        measure=20.0,
        teardown=1.2,
    )
    clock = _Clock(budget_s=600)
    clock.note(rec)
    assert clock.per_run() == pytest.approx(75.8 + 3.0 + 20.0 + 1.2)


def test_one_arm_when_the_incumbent_is_the_baseline_and_the_budget_holds_it() -> None:
    plan = make_plan(12 * 60, [60.0, 62.0, 58.0], arms=("incumbent (baseline)",), rounds=2)
    assert plan.remeasure_runs == 2 and plan.promotion_runs == 4 and plan.fits
    assert plan.candidates >= 4  # 11.4 usable min at 1 min a run: 11 runs, 6 of them planned elsewhere
    text = "\n".join(plan.lines())
    assert text.startswith("plan: 12.0 min at 1.0 min an engine run (median of 3 measured run(s))")
    assert "2 round(s) of 1 arm(s)" in text and "search: about" in text


def test_a_short_budget_shrinks_the_rounds_and_names_the_smallest_budget() -> None:
    # 2 arms x 2 rounds + 2 candidates + 2 x 2 promotion runs = 10 runs of 60 s: 7 min cannot hold
    # it; one round (2 + 2 + 2 runs, 6 min) can.
    plan = make_plan(7 * 60, [60.0], arms=("baseline", "incumbent"), rounds=2)
    assert plan.rounds == 1 and plan.asked_rounds == 2 and plan.fits
    text = "\n".join(plan.lines())
    assert "1 round(s) instead of 2, so that the search still runs" in text


def test_a_budget_too_small_for_one_round_says_what_would_hold_it() -> None:
    plan = make_plan(4 * 60, [60.0], arms=("baseline", "incumbent"), rounds=2)
    assert plan.rounds == 1 and not plan.fits
    # one round: 2 re-measurement runs, 2 candidates, 2 promotion runs = 6 min, over 95%: 6.3 min
    assert plan.smallest_budget_s == pytest.approx(6 * 60 / 0.95)
    assert "needs at least 6.3 min (fix: --budget 7m or more)" in "\n".join(plan.lines())


def test_one_round_takes_its_band_from_the_passes_then_earlier_nights_never_zero() -> None:
    one_pass = [[_run(3422.0)]]
    band = noise_band(one_pass, "ttft_p50", [])
    assert band.value is None and "minimum gain stands in" in band.source
    assert noise_band(one_pass, "ttft_p50", [0.0, 0.06]).value == pytest.approx(0.06)
    two_passes = [[_run(3422.0, passes=(3422.0, 4123.0))]]
    band = noise_band(two_passes, "ttft_p50", [])
    assert band.value is not None and band.value > 0.1 and "passes' spread" in band.source
    runs = [[_run(100.0), _run(110.0)]]
    assert noise_band(runs, "ttft_p50", []).source == "pooled over 2 runs tonight"


def test_the_regression_pools_the_noise_of_earlier_nights_of_the_same_command() -> None:
    last = {"median": 100.0, "low": 99.0, "high": 101.0, "runs": [99.0, 101.0]}
    slow = {"median": 120.0, "low": 115.0, "high": 125.0, "runs": [115.0, 125.0]}
    worse, why = regression(False, slow, last, 0.05, [[100.0, 102.0], [98.0, 100.0], [101.0, 99.0]])
    assert worse and "20.0% worse" in why
    quiet = {"median": 104.0, "low": 103.0, "high": 105.0, "runs": [103.0, 105.0]}
    assert not regression(False, quiet, last, 0.05, [[100.0, 102.0], [98.0, 100.0]])[0]
    assert regression(False, None, last, 0.05)[0]  # the incumbent no longer runs


def test_the_night_clock_counts_from_the_process_start() -> None:
    import time

    import psutil

    from autotune.nightly import process_start

    age = time.time() - psutil.Process().create_time()  # this pytest process started a while ago
    assert time.monotonic() - process_start() == pytest.approx(age, abs=0.5)


def test_a_later_night_without_a_band_does_not_say_there_was_no_earlier_night() -> None:
    one_pass = [[_run(3422.0)]]
    assert "no earlier night" in noise_band(one_pass, "ttft_p50", []).source  # night 1
    band = noise_band(one_pass, "ttft_p50", [None, None])  # night 3: nights 1 and 2 measured none
    assert band.value is None and "no earlier night" not in band.source
    assert "none of the 2 earlier night(s) measured a band" in band.source
