"""Why a request failed, in one line, and when a replay counts as behind its schedule."""

from __future__ import annotations

import json

import pytest

from autotune.bench import RequestTiming, schedule_lag


def _failed(error: str | None, status: int | None = None) -> RequestTiming:
    return RequestTiming("r", None, 0.0, 0.0, None, None, (), 0, None, error=error, status=status)


def _sent(scheduled: float, sent: float) -> RequestTiming:
    return RequestTiming("r", None, scheduled, sent, 0.01, 0.02, (0.01,), 2, 5)


# vLLM >= 0.10 wraps its error in "error"; older versions put "message" at the top level.
NEW_SHAPE = json.dumps(
    {
        "error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum "
            "context length is 2048 tokens and your request has 100 input tokens (4000 > 2048 - 100). None",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
)
OLD_SHAPE = json.dumps(
    {
        "object": "error",
        "message": "This model's maximum context length is 2048 tokens. However, you requested 4100 tokens.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
)


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (
            "HTTP 400: " + NEW_SHAPE[:300],
            400,
            "HTTP 400: 'max_tokens' or 'max_completion_tokens' is too large: 4000. This model's maximum "
            "context length is 2048 tokens and your request has 100 input tokens (4000 > 2048 - 100). None",
        ),
        (
            "HTTP 400: " + OLD_SHAPE,
            400,
            "HTTP 400: This model's maximum context length is 2048 tokens. However, you requested 4100 tokens.",
        ),
        ("HTTP 500: Internal Server Error\n<traceback>", 500, "HTTP 500: Internal Server Error"),
        (
            "HTTP 400: " + NEW_SHAPE[:60],
            400,
            "HTTP 400: 'max_tokens' or 'max_completion_token",
        ),  # cut by the excerpt
        (
            "ConnectError: [Errno 111] Connection refused",
            None,
            "ConnectError: [Errno 111] Connection refused",
        ),
        ("ReadTimeout: ", None, "ReadTimeout:"),
        ("stream ended without output", 200, "stream ended without output"),
        ("HTTP 500", 500, "HTTP 500"),
        (None, None, "no output"),  # no error text and no first token
    ],
)
def test_failure_reason_is_the_status_and_the_first_line_of_the_message(
    error: str | None, status: int | None, reason: str
) -> None:
    assert _failed(error, status).failure_reason == reason


def test_a_long_reason_is_cut_to_one_short_line() -> None:
    reason = _failed("HTTP 400: " + json.dumps({"message": "x" * 500 + "\nsecond line"}), 400).failure_reason
    assert reason is not None and len(reason) == 200 and "\n" not in reason


def test_a_successful_request_has_no_failure_reason() -> None:
    assert _sent(0.0, 0.0).failure_reason is None


def _timed(scheduled: float, sent: float, ttft: float, slot_wait: float = 0.0) -> RequestTiming:
    return RequestTiming("r", None, scheduled, sent, ttft, ttft, (), 1, 5, slot_wait=slot_wait)


@pytest.mark.parametrize(
    ("gap_s", "ttft_s", "tolerance_ms"),
    [
        (1.0, 0.01, 50.0),
        (0.2, 0.01, 20.0),
        (0.01, 0.01, 5.0),
        (0.0, 0.01, 5.0),
        (0.002, 0.2, 20.0),
        (0.0, 0.08, 8.0),
        (0.0, 3.0, 50.0),
        (0.3, 0.1, 30.0),
    ],
    ids=[
        "slow: capped at 50 ms",
        "10% of the gap",
        "fast: floor 5 ms",
        "one timestamp",
        "500 req/s, TTFT 200 ms: 10% of the TTFT",
        "a burst, TTFT 80 ms",
        "an overloaded server's TTFT of 3 s: still 50 ms",
        "the larger of gap and TTFT",
    ],
)
def test_the_lag_allowed_is_a_tenth_of_the_larger_of_planned_gap_and_median_ttft_within_5_to_50_ms(
    gap_s: float, ttft_s: float, tolerance_ms: float
) -> None:
    timings = [_timed(i * gap_s, i * gap_s + 0.001, ttft_s) for i in range(11)]
    lag = schedule_lag(timings)
    assert lag.tolerance_ms == pytest.approx(tolerance_ms)
    assert lag.p99_ms == pytest.approx(1.0)
    assert not lag.behind and lag.note() == ""


def test_failed_requests_do_not_count_in_the_median_ttft() -> None:
    ok = [_timed(0.0, 0.0, 0.2) for _ in range(3)]
    assert schedule_lag([*ok, *(_failed("HTTP 500") for _ in range(5))]).ttft_p50_ms == pytest.approx(200.0)
    assert schedule_lag([_failed("HTTP 500")]).ttft_p50_ms is None


def test_the_note_says_whether_the_server_or_the_replayer_made_requests_late() -> None:
    # 100 requests due at once, TTFT 100 ms (10 ms allowed), each 10 ms later than the one before
    waited = [_timed(0.0, i * 0.01, 0.1, slot_wait=i * 0.01) for i in range(100)]
    own = [_timed(0.0, i * 0.01, 0.1) for i in range(100)]
    server, replayer = schedule_lag(waited), schedule_lag(own)
    assert server.behind and replayer.behind
    assert server.slot_share == pytest.approx(1.0) and replayer.slot_share == 0.0
    assert (
        "100% of it waiting for an in-flight slot: requests in flight finished more slowly" in server.note()
    )
    assert "the replayer itself was late" in replayer.note()
    assert "median TTFT 100.0 ms" in server.note() and "allowed 10.0 ms" in server.note()


def test_a_run_whose_lag_p99_exceeds_the_tolerance_is_behind_with_a_note() -> None:
    # 100 requests planned 100 ms apart (10 ms allowed); the last 5 left 30 ms late
    timings = [_sent(i * 0.1, i * 0.1 + (0.03 if i >= 95 else 0.0)) for i in range(100)]
    lag = schedule_lag(timings)
    assert lag.tolerance_ms == pytest.approx(10.0)
    assert lag.p99_ms == pytest.approx(30.0) and lag.max_ms == pytest.approx(30.0)
    assert lag.behind
    assert "lag p99 30.0 ms" in lag.note() and "allowed 10.0 ms" in lag.note()


def test_early_requests_count_as_on_time_and_no_requests_as_on_schedule() -> None:
    assert schedule_lag([_sent(1.0, 0.5), _sent(2.0, 2.0)]).max_ms == 0.0
    empty = schedule_lag([])
    assert not empty.behind and empty.p99_ms == 0.0
