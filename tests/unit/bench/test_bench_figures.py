"""Figures as ``vllm bench serve`` defines them, checked against numbers worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from autotune.bench import RequestTiming, TrialFigures, failure_counts, meets_slos, summarize


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


def _http(status: int, message: str) -> RequestTiming:
    body = json.dumps({"error": {"message": message, "type": "BadRequestError", "code": status}})
    return _t(f"f{message[:5]}", None, None, (), 0, error=f"HTTP {status}: {body[:300]}")


def test_failures_are_counted_by_reason_commonest_first() -> None:
    too_long = [
        _http(400, f"This model's maximum context length is 2048 tokens. You asked for {n}.")
        for n in (3000, 4000, 5000)
    ]
    timings = [*TIMINGS, *too_long, _http(400, "max_tokens must be at least 1, got 0.")]
    f = summarize(timings, DURATION)
    assert f.failed == 5
    # requests whose reasons differ only in their numbers count as one reason, shown as the first seen
    assert list(f.failures.items()) == [
        ("HTTP 400: This model's maximum context length is 2048 tokens. You asked for 3000.", 3),
        ("HTTP 500: boom", 1),  # ties in the order first seen
        ("HTTP 400: max_tokens must be at least 1, got 0.", 1),
    ]


def test_more_than_five_reasons_keep_the_top_five_and_count_the_rest_as_other() -> None:
    timings = [
        _t(f"x{i}", None, None, (), 0, error=f"HTTP 500: reason {chr(97 + i)}")
        for i in range(7)
        for _ in range(7 - i)
    ]
    failures = failure_counts(timings)
    assert list(failures) == [*(f"HTTP 500: reason {c}" for c in "abcde"), "other"]
    assert failures["HTTP 500: reason a"] == 7 and failures["other"] == 2 + 1
    assert sum(failures.values()) == len(timings)


def test_figures_say_when_the_replayer_fell_behind() -> None:
    on_time = summarize(TIMINGS[:1], DURATION)
    assert not on_time.behind_schedule and on_time.schedule_note == ""
    # TIMINGS: planned 0.4 s apart on average, median TTFT 250 ms: 40 ms allowed; r2 left 20 ms late
    assert not summarize(TIMINGS, DURATION).behind_schedule
    late = (*TIMINGS, _t("late", 0.1, 0.2, (), 1, scheduled=1.7, sent=2.0))
    f = summarize(late, DURATION)
    assert f.behind_schedule and "behind its schedule" in f.schedule_note


def test_figures_as_dict_are_json_and_load_again_also_without_the_newer_fields() -> None:
    f = summarize([*TIMINGS, _http(400, "too long")], DURATION)
    d = json.loads(json.dumps(f.as_dict()))
    assert d["failures"] == {"HTTP 500: boom": 1, "HTTP 400: too long": 1}
    assert d["behind_schedule"] is False and d["schedule_note"] == ""
    # planned 1.6 s / 5 = 320 ms apart (more than the median TTFT, 250 ms): a tenth of it allowed
    assert d["lag_max_ms"] == pytest.approx(20.0) and d["lag_tolerance_ms"] == pytest.approx(32.0)
    assert TrialFigures(**d) == f
    newer = ("behind_schedule", "schedule_note", "failures", "lag_max_ms", "lag_tolerance_ms")
    older = {k: v for k, v in d.items() if k not in newer}
    assert TrialFigures(**older).failures == {} and TrialFigures(**older).lag_max_ms == 0.0
