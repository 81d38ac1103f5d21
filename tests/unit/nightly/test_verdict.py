"""The regression verdict across a new day's traffic: the incumbent set against the baseline measured
beside it, not against its figure on yesterday's traffic."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import optuna

from autotune.engine import VLLM
from autotune.nightly._history import NightRecord
from autotune.nightly._night import _verdict
from autotune.nightly._verdict import regression, regression_against_baseline
from autotune.space import EngineConfig

ARGS = ["--max-num-seqs", "16"]


def _fig(*runs: float) -> dict[str, Any]:
    return {"median": sorted(runs)[len(runs) // 2], "low": min(runs), "high": max(runs), "runs": list(runs)}


def _previous(inc: dict[str, Any], base: dict[str, Any]) -> NightRecord:
    return NightRecord(
        number=1, date="2026-12-01", fingerprints={}, changes=[], metric="ttft_p90",
        baseline_figure=base, incumbent_label="promoted trial #3", incumbent_args=ARGS,
        incumbent_env={}, incumbent_params={}, incumbent_figure=inc, noise_band=0.05,
        regression=False, regression_reason="", decision="promoted", reason="", promoted_trial=3, trials=5,
    )  # fmt: skip


def _night(inc: dict[str, Any], base: dict[str, Any], previous: NightRecord, drift: list[str]) -> Any:
    return SimpleNamespace(
        previous=previous,
        inc_config=EngineConfig.recorded(ARGS),
        inc_words=lambda: VLLM.render(EngineConfig.recorded(ARGS)),
        study=optuna.create_study(),
        inc_figure=inc,
        base_figure=base,
        one_arm=False,
        drift=drift,
        maximize=False,
        options=SimpleNamespace(min_improvement=0.03),
    )


YESTERDAY = _previous(_fig(40.0, 41.0), _fig(50.0, 51.0))
HARDER = ["working set (tokens) 2,048 -> 6,144 (x3.0)"]


def test_a_harder_days_traffic_slowing_both_arms_is_no_regression() -> None:
    inc, base = _fig(120.0, 123.0), _fig(150.0, 152.0)
    assert regression(False, inc, YESTERDAY.incumbent_figure, 0.03)[0]  # what was judged before: 3x "worse"
    regressed, why = _verdict(_night(inc, base, YESTERDAY, HARDER))
    assert not regressed, why
    assert "0.804x -> 0.809x of the baseline's" in why


def test_a_config_that_slowed_against_the_baseline_is_flagged_across_a_traffic_change() -> None:
    regressed, why = _verdict(_night(_fig(150.0, 152.0), _fig(100.0, 101.0), YESTERDAY, HARDER))
    assert regressed, why
    assert "0.804x -> 1.5x of the baseline's" in why


def test_without_a_baseline_both_nights_a_traffic_change_is_not_compared() -> None:
    previous = _previous(_fig(40.0, 41.0), None)  # type: ignore[arg-type]
    regressed, why = _verdict(_night(_fig(400.0, 410.0), _fig(100.0, 101.0), previous, HARDER))
    assert not regressed and why.startswith("not compared: the workload changed")


def test_the_same_traffic_is_still_judged_on_the_incumbents_own_figure() -> None:
    regressed, why = _verdict(_night(_fig(80.0, 82.0), _fig(100.0, 101.0), YESTERDAY, []))
    assert regressed and "than its last figure" in why


def test_the_relative_verdict_counts_the_noise_of_all_four_medians() -> None:
    """Same ratios, more runs: the threshold shrinks with the counts of all four figures."""
    two = regression_against_baseline(False, _fig(44, 46), _fig(50, 52), _fig(40, 42), _fig(50, 52), 0.0)
    four = regression_against_baseline(
        False, _fig(44, 46, 44, 46), _fig(50, 52, 50, 52), _fig(40, 42, 40, 42), _fig(50, 52, 50, 52), 0.0
    )
    threshold = [float(w.split("threshold ")[1].split("%")[0]) for _, w in (two, four)]
    assert threshold[1] < threshold[0]
