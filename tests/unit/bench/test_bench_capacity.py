"""Capacity at an SLO: the bracket-then-bisect search over load levels, each level's verdict, and the
workload's own request rate (issue 45). The levels here come from a modelled server whose TTFT p90
rises with load; no HTTP."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from autotune.bench import ArrivalSpec, TrialFigures
from autotune.bench._capacity import (
    CapacityPlan,
    Level,
    arrival_span,
    base_request_rate,
    bracket_capacity,
    level_verdict,
)
from autotune.errors import ConfigError
from autotune.workload import load_workload


def _figures(ttft_p90: float, *, saturated: bool = False, failed: int = 0) -> TrialFigures:
    return TrialFigures(
        completed=40,
        failed=failed,
        duration_s=4.0,
        request_throughput=10.0,
        output_throughput=100.0,
        total_output_tokens=400,
        percentiles_ms={"ttft_p90": ttft_p90, "ttft_p50": ttft_p90 / 2},
        mean_ms={"ttft": ttft_p90 / 2},
        goodput=None,
        lag_p99_ms=0.0,
        saturated=saturated,
    )


def _server(capacity_rps: float, base_rps: float, plan: CapacityPlan, seen: list[float]):
    """A level's TTFT p90 is 100 ms below ``capacity_rps`` and grows past the 300 ms SLO above it."""

    async def measure(m: float) -> Level:
        seen.append(m)
        rps = base_rps * m
        ttft = 100.0 if rps <= capacity_rps else 400.0 * rps / capacity_rps
        figures = _figures(ttft, saturated=rps > 1.5 * capacity_rps)
        held, why = level_verdict(figures, plan.slos_ms)
        return Level(multiplier=m, offered_rps=rps, figures=figures, held=held, broke=why)

    return measure


@pytest.mark.parametrize("true_capacity", [3.0, 7.3, 19.0, 41.0, 100.0])
def test_the_bracket_holds_the_true_capacity_within_the_tolerance_or_the_level_cap(
    true_capacity: float,
) -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, tolerance=0.10, max_levels=8)
    seen: list[float] = []
    result = asyncio.run(bracket_capacity(plan, 5.0, _server(true_capacity, 5.0, plan, seen)))
    held, broke = result.held, result.broke
    assert held is not None and broke is not None
    assert held.offered_rps <= true_capacity < broke.offered_rps
    assert len(result.levels) <= plan.max_levels and len(seen) == len(result.levels)
    if len(result.levels) < plan.max_levels:  # it stopped on its own: the bracket is within 10%
        assert (broke.multiplier - held.multiplier) / held.multiplier <= 0.10
    assert result.capacity_rps == held.offered_rps
    f = result.figures()
    assert f["capacity"] == pytest.approx(held.offered_rps, rel=1e-3)
    assert f["capacity_hi"] == pytest.approx(broke.offered_rps, rel=1e-3)
    assert [lv["x"] for lv in f["capacity_levels"]] == [round(m, 4) for m in seen]


def test_it_doubles_first_then_bisects() -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, tolerance=0.10, max_levels=6)
    seen: list[float] = []
    asyncio.run(bracket_capacity(plan, 1.0, _server(5.5, 1.0, plan, seen)))
    assert seen[:4] == [1.0, 2.0, 4.0, 8.0]  # doubled until a level broke
    assert seen[4:] == [6.0, 5.0]  # then the midpoints of [4, 8] and [4, 6]


def test_below_the_recorded_rate_it_halves_until_a_level_holds() -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, tolerance=0.2, max_levels=6)
    seen: list[float] = []
    result = asyncio.run(bracket_capacity(plan, 10.0, _server(3.0, 10.0, plan, seen)))  # 0.3x
    assert seen[:3] == [1.0, 0.5, 0.25]
    assert result.held is not None and result.held.offered_rps <= 3.0 < result.broke.offered_rps  # type: ignore[union-attr]


def test_no_level_holds_is_capacity_zero_with_the_lowest_level_and_the_fix() -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, max_levels=10)
    seen: list[float] = []
    result = asyncio.run(bracket_capacity(plan, 10.0, _server(0.01, 10.0, plan, seen)))
    assert result.held is None and result.capacity_rps == 0.0
    assert seen == [1.0, 0.5, 0.25]  # down to the floor (a quarter of the recorded pace), then stopped
    note = result.note()
    assert "no level held" in note and "0.25x" in note and "ttft_p90" in note and "fix:" in note
    assert result.reported is not None and result.reported.multiplier == pytest.approx(0.25)


def test_an_open_bracket_says_the_capacity_is_at_least_the_last_level() -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, max_levels=3)
    result = asyncio.run(bracket_capacity(plan, 1.0, _server(1000.0, 1.0, plan, [])))
    assert result.broke is None and result.held is not None and result.held.multiplier == 4.0
    assert "at least" in result.note() and result.figures()["capacity_hi"] is None


def test_the_listener_can_stop_the_search() -> None:
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, max_levels=6)
    seen: list[float] = []
    result = asyncio.run(
        bracket_capacity(plan, 1.0, _server(5.5, 1.0, plan, seen), after_level=lambda r: len(r.levels) == 2)
    )
    assert len(result.levels) == 2 and seen == [1.0, 2.0]


def test_a_level_breaks_on_its_slo_on_saturation_and_on_failed_requests() -> None:
    slos = {"ttft_p90": 300.0, "tpot_p90": 50.0}
    held, why = level_verdict(_figures(120.0), {"ttft_p90": 300.0})
    assert held and why == ""
    held, why = level_verdict(_figures(420.0), {"ttft_p90": 300.0})
    assert not held and why == "ttft_p90 420 ms > 300 ms"
    held, why = level_verdict(_figures(120.0, saturated=True), {"ttft_p90": 300.0})
    assert not held and why == "saturated"
    held, why = level_verdict(_figures(120.0, failed=2), {"ttft_p90": 300.0})
    assert not held and "2 requests failed" in why
    held, why = level_verdict(_figures(120.0), slos)  # tpot_p90 not in the figures: not measured, not held
    assert not held and "tpot_p90 not measured" in why


@pytest.mark.parametrize(
    ("plan_kwargs", "fragment"),
    [
        ({"slos_ms": {}}, "needs at least one --slo"),
        ({"slos_ms": {"ttft_p90": 300.0}, "tolerance": 1.5}, "--capacity-tolerance: 1.5"),
        ({"slos_ms": {"ttft_p90": 300.0}, "max_levels": 1}, "--capacity-levels: 1"),
        ({"slos_ms": {"ttft_p90": 300.0}, "min_level_s": -1.0}, "--capacity-min-level: -1"),
    ],
)
def test_a_plan_refuses_bad_settings_in_one_line(plan_kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match="fix:") as err:
        CapacityPlan(**plan_kwargs)  # type: ignore[arg-type]
    assert fragment in str(err.value) and "\n" not in str(err.value)


def _workload(tmp_path: Path, n: int, step: float, *, sessions: bool = False) -> Path:
    path = tmp_path / "w.jsonl"
    with path.open("w") as f:
        for i in range(n):
            row: dict[str, object] = {"prompt": f"q{i} words", "max_tokens": 4, "timestamp": i * step}
            if sessions:
                row = {**row, "session_id": f"s{i // 2}", "timestamp": (i // 2) * step}
            f.write(json.dumps(row) + "\n")
    return path


def test_the_workload_rate_is_its_requests_over_its_arrival_span(tmp_path: Path) -> None:
    wl = load_workload(_workload(tmp_path, 41, 0.25))  # 41 arrivals 0.25 s apart: 4 req/s
    assert base_request_rate(wl, ArrivalSpec(mode="timestamps")) == pytest.approx(4.0)
    assert base_request_rate(wl, ArrivalSpec(mode="timestamps", speed=2.0)) == pytest.approx(8.0)
    wl2 = load_workload(_workload(tmp_path, 40, 0.5, sessions=True))  # 20 sessions of 2 turns over 9.5 s
    assert base_request_rate(wl2, ArrivalSpec(mode="timestamps")) == pytest.approx(2 * 19 / 9.5)


def test_a_closed_loop_or_a_short_workload_cannot_be_bracketed(tmp_path: Path) -> None:
    wl = load_workload(_workload(tmp_path, 41, 0.25))
    with pytest.raises(ConfigError, match="closed loop") as err:
        base_request_rate(wl, ArrivalSpec(mode="closed", concurrency=4))
    assert "--rate" in str(err.value)
    short = load_workload(_workload(tmp_path, 5, 0.25))
    with pytest.raises(ConfigError, match="too few to bracket"):
        base_request_rate(short, ArrivalSpec(mode="timestamps"))
    burst = load_workload(_workload(tmp_path, 30, 0.0))
    with pytest.raises(ConfigError, match="same instant"):
        base_request_rate(burst, ArrivalSpec(mode="timestamps"))
    assert math.isfinite(base_request_rate(burst, ArrivalSpec(mode="poisson", rate=5.0)))


def test_the_load_stops_rising_where_a_level_would_be_a_burst() -> None:
    """A workload whose arrivals span 10 s: no level may send them in under 2 s, so 5x is the ceiling."""
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0}, max_levels=8).with_workload_span(10.0)
    seen: list[float] = []
    result = asyncio.run(bracket_capacity(plan, 1.0, _server(1000.0, 1.0, plan, seen)))
    assert seen == [1.0, 2.0, 4.0, 5.0]
    assert result.broke is None and "at least" in result.note() and "burst" in result.note()


def test_a_short_level_replays_the_workload_again_after_itself_until_it_lasts(tmp_path: Path) -> None:
    """Levels of a few seconds measure a burst and move with one slow second: a level's arrivals span
    at least min_level_s (10 s by default), the workload repeated with its pace kept."""
    plan = CapacityPlan(slos_ms={"ttft_p90": 300.0})
    assert plan.min_level_s == 10.0
    assert [plan.passes(s) for s in (15.7, 10.0, 7.85, 3.1, 0.0)] == [1, 1, 2, 4, 16]
    assert CapacityPlan(slos_ms={"ttft_p90": 300.0}, min_level_s=0).passes(0.5) == 1
    wl = load_workload(_workload(tmp_path, 12, 0.5, sessions=True))  # 6 sessions of 2 turns, 0 to 2.5 s
    twice = wl.repeated(2)
    assert len(twice) == 24 and [r.index for r in twice.requests] == list(range(24))
    copy = twice.requests[12:]
    # a period is the span (2.5 s) plus the mean gap (0.5 s): the copy arrives at the file's pace
    assert [r.timestamp for r in copy[:4]] == [3.0, 3.0, 3.5, 3.5] and copy[-1].timestamp == 5.5
    assert {r.session_id for r in copy} == {f"s{i}~1" for i in range(6)} and copy[0].id.endswith("~1")
    assert len(twice.sessions()) == 12 and wl.repeated(1) is wl
    spec = ArrivalSpec(mode="timestamps")
    assert base_request_rate(twice, spec) == pytest.approx(base_request_rate(wl, spec))  # the pace kept
    assert arrival_span(twice, spec) == pytest.approx(5.5)
