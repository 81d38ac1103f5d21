from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.bench import ArrivalSpec, plan_offsets
from autotune.errors import ConfigError
from autotune.workload import Workload, WorkloadRequest


def test_timestamps_start_at_zero_and_are_divided_by_speed() -> None:
    offsets = plan_offsets([10.0, 12.0, 11.0, 16.0], ArrivalSpec(mode="timestamps", speed=2.0))
    assert offsets is not None
    np.testing.assert_allclose(offsets, [0.0, 1.0, 0.5, 3.0])


def test_timestamps_mode_needs_a_timestamp_on_every_request() -> None:
    with pytest.raises(ConfigError, match="timestamp"):
        plan_offsets([0.0, None], ArrivalSpec(mode="timestamps"))


def test_closed_loop_has_no_planned_offsets() -> None:
    assert plan_offsets([None, None], ArrivalSpec(mode="closed", concurrency=2)) is None


def test_poisson_first_arrival_at_zero_and_mean_rate_as_asked() -> None:
    offsets = plan_offsets([None] * 4001, ArrivalSpec(mode="poisson", rate=20.0, seed=1))
    assert offsets is not None
    assert offsets[0] == 0.0
    gaps = np.diff(offsets)
    assert (gaps >= 0).all()
    assert 1.0 / gaps.mean() == pytest.approx(20.0, rel=0.05)
    # exponential gaps: standard deviation equals the mean
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)


def test_same_seed_same_plan_other_seed_other_plan() -> None:
    first = plan_offsets([None] * 50, ArrivalSpec(mode="poisson", rate=5.0, seed=7))
    again = plan_offsets([None] * 50, ArrivalSpec(mode="poisson", rate=5.0, seed=7))
    other = plan_offsets([None] * 50, ArrivalSpec(mode="poisson", rate=5.0, seed=8))
    assert first is not None and again is not None and other is not None
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_gamma_keeps_the_rate_and_low_burstiness_is_burstier() -> None:
    offsets = plan_offsets([None] * 4001, ArrivalSpec(mode="gamma", rate=10.0, burstiness=0.25, seed=3))
    assert offsets is not None
    gaps = np.diff(offsets)
    assert 1.0 / gaps.mean() == pytest.approx(10.0, rel=0.1)
    # gamma with shape k has coefficient of variation 1/sqrt(k) = 2
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.15)


def test_no_sessions_no_offsets() -> None:
    offsets = plan_offsets([], ArrivalSpec(mode="poisson", rate=1.0))
    assert offsets is not None and len(offsets) == 0
    offsets = plan_offsets([], ArrivalSpec(mode="timestamps"))
    assert offsets is not None and len(offsets) == 0


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"mode": "poisson"}, "--rate"),
        ({"mode": "gamma", "rate": 0.0}, "--rate"),
        ({"mode": "closed"}, "--concurrency"),
        ({"mode": "closed", "concurrency": 0}, "--concurrency"),
        ({"mode": "timestamps", "speed": 0.0}, "--speed"),
        ({"mode": "gamma", "rate": 1.0, "burstiness": -1.0}, "--burstiness"),
    ],
)
def test_bad_arrival_settings_name_the_option(kwargs: dict[str, object], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        ArrivalSpec(**kwargs)  # type: ignore[arg-type]


def test_default_arrival_replays_timestamps_when_the_file_has_them() -> None:
    def wl(ts: float | None) -> Workload:
        return Workload(
            path=Path("w.jsonl"),
            requests=(WorkloadRequest(index=0, line=1, id="a", max_tokens=4, prompt="x", timestamp=ts),),
        )

    assert ArrivalSpec.default_for(wl(0.5)).mode == "timestamps"
    assert ArrivalSpec.default_for(wl(None)).mode == "closed"
