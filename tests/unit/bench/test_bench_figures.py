"""Figures as ``vllm bench serve`` defines them, checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from autotune.bench import RequestTiming, meets_slos, summarize


def _t(
    rid: str,
    ttft: float | None,
    latency: float | None,
    itl: tuple[float, ...],
    out: int,
    *,
    scheduled: float = 0.0,
    sent: float = 0.0,
    error: str | None = None,
) -> RequestTiming:
    return RequestTiming(
        request_id=rid,
        session=None,
        scheduled=scheduled,
        sent=sent,
        ttft=ttft,
        latency=latency,
        itl=itl,
        output_tokens=out,
        prompt_tokens=10,
        error=error,
    )


# ttft (s)  latency (s)  output tokens  tpot (s)
# 0.1       0.5          5              (0.5-0.1)/4 = 0.1
# 0.2       0.8          4              (0.8-0.2)/3 = 0.2
# 0.3       1.1          5              (1.1-0.3)/4 = 0.2
# 0.4       0.4          1              none (one token)
# failed (HTTP 500): counted as failed, in no latency figure
TIMINGS = (
    _t("r1", 0.1, 0.5, (0.1, 0.1, 0.1, 0.1), 5, scheduled=0.0, sent=0.0),
    _t("r2", 0.2, 0.8, (0.2, 0.2, 0.2), 4, scheduled=0.5, sent=0.52),
    _t("r3", 0.3, 1.1, (0.2, 0.2, 0.2, 0.2), 5, scheduled=1.0, sent=1.0),
    _t("r4", 0.4, 0.4, (), 1, scheduled=1.5, sent=1.5),
    _t("bad", None, None, (), 0, scheduled=1.6, sent=1.6, error="HTTP 500: boom"),
)
DURATION = 2.0


def test_counts_and_throughput() -> None:
    f = summarize(TIMINGS, DURATION)
    assert (f.completed, f.failed) == (4, 1)
    assert f.total_output_tokens == 15
    assert f.request_throughput == pytest.approx(4 / 2.0)
    assert f.output_throughput == pytest.approx(15 / 2.0)
    assert f.goodput is None


def test_ttft_percentiles_interpolate_like_numpy_in_vllm_bench() -> None:
    f = summarize(TIMINGS, DURATION)
    # sorted [100, 200, 300, 400] ms; p50 halfway between 200 and 300; p90 at rank 2.7
    assert f.percentiles_ms["ttft_p50"] == pytest.approx(250.0)
    assert f.percentiles_ms["ttft_p90"] == pytest.approx(370.0)
    assert f.mean_ms["ttft"] == pytest.approx(250.0)
    assert f.metric("ttft_p90") == pytest.approx(370.0)


def test_tpot_leaves_out_single_token_requests() -> None:
    f = summarize(TIMINGS, DURATION)
    # [100, 200, 200] ms
    assert f.mean_ms["tpot"] == pytest.approx(500.0 / 3)
    assert f.percentiles_ms["tpot_p50"] == pytest.approx(200.0)
    assert f.metric("tpot_mean") == pytest.approx(500.0 / 3)


def test_itl_pools_every_gap_of_every_request() -> None:
    f = summarize(TIMINGS, DURATION)
    # 4 gaps of 100 ms and 7 of 200 ms
    assert f.mean_ms["itl"] == pytest.approx((4 * 100 + 7 * 200) / 11)
    assert f.percentiles_ms["itl_p50"] == pytest.approx(200.0)
    assert f.percentiles_ms["itl_p90"] == pytest.approx(200.0)


def test_e2el_is_latency_of_completed_requests() -> None:
    f = summarize(TIMINGS, DURATION)
    # sorted [400, 500, 800, 1100] ms
    assert f.percentiles_ms["e2el_p50"] == pytest.approx(650.0)
    assert f.percentiles_ms["e2el_p99"] == pytest.approx(800 + 0.97 * 300)
    assert f.mean_ms["e2el"] == pytest.approx(700.0)


def test_goodput_counts_completed_requests_meeting_every_slo() -> None:
    # ttft <= 250 ms: r1, r2 -> 2 / 2 s
    assert summarize(TIMINGS, DURATION, slos_ms={"ttft": 250}).goodput == pytest.approx(1.0)
    # and tpot <= 150 ms: r1 only (r4 has one token: its TPOT counts as 0, as in vllm bench serve)
    assert summarize(TIMINGS, DURATION, slos_ms={"ttft": 250, "tpot": 150}).goodput == pytest.approx(0.5)
    # e2el <= 450 ms: r4 only; the failed request never counts
    assert summarize(TIMINGS, DURATION, slos_ms={"e2el": 450}).goodput == pytest.approx(0.5)
    # a limit everyone meets: every completed request, none of the failed ones
    assert summarize(TIMINGS, DURATION, slos_ms={"ttft": 1e9}).goodput == pytest.approx(2.0)


def test_a_failed_request_never_meets_an_slo() -> None:
    assert not meets_slos(TIMINGS[-1], {"ttft": 1e9})
    assert meets_slos(TIMINGS[3], {"tpot": 1.0})


def test_lag_p99_reports_how_late_requests_left() -> None:
    f = summarize(TIMINGS, DURATION)
    # lags [0, 20, 0, 0, 0] ms -> p99 at rank 3.96 of the sorted list: 0 + 0.96 * 20
    assert f.lag_p99_ms == pytest.approx(19.2)


def test_all_failed_gives_nan_latencies_and_zero_throughput() -> None:
    f = summarize([TIMINGS[-1]], 1.0)
    assert (f.completed, f.failed) == (0, 1)
    assert f.output_throughput == 0.0
    assert math.isnan(f.metric("ttft_p90"))


def test_unknown_figure_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        summarize(TIMINGS, DURATION).metric("ttft_p42")


def test_figures_survive_a_round_trip_through_a_dict() -> None:
    d = summarize(TIMINGS, DURATION).as_dict()
    assert d["completed"] == 4
    assert d["percentiles_ms"]["ttft_p50"] == pytest.approx(250.0)  # type: ignore[index]
