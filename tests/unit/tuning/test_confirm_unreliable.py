"""Runs whose figures are unreliable cannot confirm (issue 45, found with `make demo`): a gain read off
runs that fell behind their schedule stands only if the runs on schedule alone show it; else the
verdict is "inconclusive". A capacity is confirmed only above the baseline's bracket."""

from __future__ import annotations

from autotune.study import TrialRecord, TrialStatus
from autotune.study._record import Figures
from autotune.trial import ArmSummary, Comparison, significant_gain
from autotune.tuning._confirm import _above_the_base_bracket, _on_schedule


def _run(value: float, *, late: bool = False, **raw: object) -> TrialRecord:
    return TrialRecord(
        status=TrialStatus.OK,
        figures=Figures(
            {"completed": 10, "percentiles_ms": {"ttft_p50": value}, "behind_schedule": late, **raw}
        ),
    )


def _arm(name: str, runs: list[TrialRecord], metric: str = "ttft_p50") -> ArmSummary:
    return ArmSummary(name, (), tuple(runs), {metric: [r.figures.metric(metric) for r in runs if r.figures]})


def test_late_runs_are_left_out_and_the_gain_must_hold_on_the_others() -> None:
    # the demo's case: the baseline read 540 and 1,618 ms in runs behind their schedule
    comp = Comparison(
        a=_arm("baseline", [_run(540.0, late=True), _run(1618.0, late=True)]),
        b=_arm("trial 3", [_run(265.0), _run(270.0)]),
    )
    assert significant_gain(comp, "ttft_p50", maximize=False)[0]  # on every run it looks confirmed
    kept = _on_schedule(comp)
    assert not kept.a.runs and kept.a.figures["ttft_p50"] == [] and len(kept.b.runs) == 2
    one_late = Comparison(
        a=_arm("baseline", [_run(540.0, late=True), _run(610.0)]),
        b=_arm("trial 3", [_run(265.0), _run(270.0)]),
    )
    kept = _on_schedule(one_late)
    assert kept.a.figures["ttft_p50"] == [610.0]
    assert significant_gain(kept, "ttft_p50", maximize=False)[0]  # the on-schedule runs alone still show it


def test_a_capacity_must_hold_where_the_baseline_broke_in_every_run() -> None:
    def cap(held: float, broke: float | None) -> TrialRecord:
        return TrialRecord(status=TrialStatus.OK, figures=Figures({"capacity": held, "capacity_hi": broke}))

    base = ArmSummary("baseline", (), (cap(12.0, 15.0), cap(12.0, 15.0)), {"capacity": [12.0, 12.0]})
    apart = Comparison(
        a=base, b=ArmSummary("t", (), (cap(15.0, 18.0), cap(17.8, None)), {"capacity": [15.0, 17.8]})
    )
    ok, why = _above_the_base_bracket(apart, "gain")
    assert ok and "15 req/s" in why
    near = Comparison(
        a=base, b=ArmSummary("t", (), (cap(13.5, 15.0), cap(15.0, 18.0)), {"capacity": [13.5, 15.0]})
    )
    ok, why = _above_the_base_bracket(near, "gain")
    assert not ok and "within the bracket's resolution" in why


def test_a_capacity_above_a_baseline_of_zero_is_a_gain() -> None:
    """A baseline whose lowest level broke its SLO carries 0 req/s: a configuration that carries any
    load in every run, ranges apart, is confirmed (it read "0.0% better, within the noise floor")."""
    a = ArmSummary("A", (), (), {"capacity": [0.0, 0.0]})
    b = ArmSummary("B", (), (), {"capacity": [6.0, 9.0]})
    ok, why = significant_gain(Comparison(a=a, b=b), "capacity", maximize=True)
    assert ok, why
    assert "better than A's 0" in why and "ranges do not overlap" in why
    ok, why = significant_gain(Comparison(a=b, b=a), "capacity", maximize=True)
    assert not ok and "100.0% worse" in why, why
