"""benchmarks/predict_study.py's reading of a run (the real runs start vLLM 3 x 4 and 3 x 6 times: the
lead runs them, benchmarks/RESULTS.md): the grid's best and its near ties from predict_grid.py's JSON,
and the engine start at which a study first launched one of them (a veto, a reused twin and a prior's
refusal are not starts)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import predict_study as ps  # noqa: E402


def test_the_grids_best_and_its_ties_within_near() -> None:
    grid = {
        "rows": [
            {"key": "a", "measured": {"ttft_p90_ms": 100.0}},
            {"key": "b", "measured": {"ttft_p90_ms": 69.0}},
            {"key": "c", "measured": {"ttft_p90_ms": 74.0}},
            {"key": "d", "measured": None},
        ]
    }
    best, close, measured = ps.grid_best(grid, 0.1)
    assert best == "b" and close == {"b", "c"} and set(measured) == {"a", "b", "c"}


def test_a_start_counts_only_where_an_engine_was_launched() -> None:
    rows = [
        {"key": "base", "started": True},
        {"key": "x", "started": False},  # vetoed: predicted worse
        {"key": "c", "started": True},
        {"key": "b", "started": True},
    ]
    assert ps._reached(rows, {"b"}) == 3
    assert ps._reached(rows, {"b", "c"}) == 2
    assert ps._reached(rows, {"z"}) is None
