"""Replay against an in-process OpenAI-compatible server (httpx.MockTransport) that streams SSE."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotune.bench import ArrivalSpec, ReplayResult, ReplayTarget, RequestTiming, replay, summarize
from autotune.workload import ChatMessage, Workload, WorkloadRequest

TARGET = ReplayTarget(base_url="http://127.0.0.1:8000", model="tiny", api_key="k-123")


def _sse(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


class FakeOpenAIServer:
    """Streams each answer in three pieces, like vLLM: first piece after ``first_s``, then every ``gap_s``.

    A request is named by its prompt or by the content of its last user message; the answer to
    ``NAME`` is ``A(NAME)``. Names in ``fail`` get HTTP 500, names in ``refuse`` a connection error,
    names in ``reject`` the given status and body, names in ``stream_error`` a 200 whose stream
    carries an error object (as vLLM sends when a request fails after streaming began).
    """

    def __init__(
        self,
        *,
        first_s: float = 0.02,
        gap_s: float = 0.01,
        fail: Collection[str] = (),
        refuse: Collection[str] = (),
        reject: Mapping[str, tuple[int, str]] | None = None,
        stream_error: Collection[str] = (),
    ) -> None:
        self.first_s = first_s
        self.gap_s = gap_s
        self.fail = fail
        self.refuse = refuse
        self.reject = reject or {}
        self.stream_error = stream_error
        self.events: list[tuple[str, str]] = []  # ("start" | "end", name), in the order they happened
        self.requests: dict[str, tuple[httpx.Request, dict[str, Any]]] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    @staticmethod
    def answer(name: str) -> str:
        return f"A({name})"

    async def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        chat = request.url.path == "/v1/chat/completions"
        if chat:
            name = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        else:
            assert request.url.path == "/v1/completions"
            name = body["prompt"]
        self.requests[name] = (request, body)
        if name in self.refuse:
            raise httpx.ConnectError("connection refused", request=request)
        if name in self.fail:
            return httpx.Response(500, text="Internal Server Error")
        if name in self.reject:
            status, text = self.reject[name]
            return httpx.Response(status, text=text)
        if name in self.stream_error:
            error = {"error": {"message": "EngineDeadError: engine core died", "code": 500}}
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_sse(error))
        self.events.append(("start", name))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        text = self.answer(name)
        pieces = [
            text[: len(text) // 3],
            text[len(text) // 3 : 2 * len(text) // 3],
            text[2 * len(text) // 3 :],
        ]

        async def stream() -> AsyncIterator[bytes]:
            await asyncio.sleep(self.first_s)
            for i, piece in enumerate(pieces):
                if i:
                    await asyncio.sleep(self.gap_s)
                choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                yield _sse({"object": "chunk", "choices": [choice]})
            yield _sse(
                {"object": "chunk", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}}
            )
            self.in_flight -= 1
            self.events.append(("end", name))
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    def run(self, workload: Workload, arrival: ArrivalSpec, **kwargs: Any) -> ReplayResult:
        async def go() -> ReplayResult:
            async with httpx.AsyncClient(transport=httpx.MockTransport(self.handler)) as client:
                return await replay(client, TARGET, workload, arrival, **kwargs)

        return asyncio.run(go())


def _workload(*requests: WorkloadRequest) -> Workload:
    return Workload(path=Path("w.jsonl"), requests=requests)


def _prompt(i: int, name: str, **kw: Any) -> WorkloadRequest:
    return WorkloadRequest(index=i, line=i + 1, id=name, max_tokens=3, prompt=name, **kw)


def _sessions(n_sessions: int, n_turns: int, *, think_time: float = 0.0) -> Workload:
    """Chat sessions ``s{j}`` with turns whose user messages are ``s{j} q{k}`` and recorded answers ``rec``."""
    requests = []
    for k in range(n_turns):  # interleaved in the file, as logs are
        for j in range(n_sessions):
            msgs: list[ChatMessage] = []
            for prev in range(k):
                msgs += [ChatMessage("user", f"s{j} q{prev}"), ChatMessage("assistant", f"rec s{j} {prev}")]
            msgs.append(ChatMessage("user", f"s{j} q{k}"))
            requests.append(
                WorkloadRequest(
                    index=len(requests),
                    line=len(requests) + 1,
                    id=f"s{j}-t{k}",
                    max_tokens=3,
                    messages=tuple(msgs),
                    session_id=f"s{j}",
                    think_time=think_time if k else 0.0,
                )
            )
    return _workload(*requests)


def test_streamed_request_records_ttft_itl_and_usage_tokens() -> None:
    server = FakeOpenAIServer(first_s=0.05, gap_s=0.03)
    result = server.run(_sessions(1, 1), ArrivalSpec(mode="closed", concurrency=1))
    (t,) = result.timings
    assert t.ok and t.error is None
    assert t.ttft is not None and t.ttft >= 0.045
    assert len(t.itl) == 2 and all(g >= 0.025 for g in t.itl)
    assert t.latency is not None and t.latency >= t.ttft + 0.05
    assert (t.output_tokens, t.prompt_tokens) == (3, 11)
    assert result.duration_s >= t.latency - 1e-6

    request, body = server.requests["s0 q0"]
    assert request.headers["authorization"] == "Bearer k-123"
    assert body["model"] == "tiny"
    assert body["stream"] is True and body["ignore_eos"] is True and body["max_tokens"] == 3


def test_prompt_requests_use_the_completions_endpoint() -> None:
    server = FakeOpenAIServer()
    result = server.run(_workload(_prompt(0, "hello")), ArrivalSpec(mode="closed", concurrency=1))
    assert result.timings[0].ok
    assert server.requests["hello"][0].url.path == "/v1/completions"


def test_server_errors_are_failed_requests_not_exceptions() -> None:
    server = FakeOpenAIServer(fail={"b"}, refuse={"c"})
    wl = _workload(_prompt(0, "a"), _prompt(1, "b"), _prompt(2, "c"), _prompt(3, "d"))
    done: list[RequestTiming] = []
    result = server.run(wl, ArrivalSpec(mode="closed", concurrency=2), on_done=done.append)
    by_id = {t.request_id: t for t in result.timings}
    assert by_id["b"].error is not None and by_id["b"].error.startswith("HTTP 500")
    assert not by_id["b"].ok
    assert by_id["c"].error is not None and "ConnectError" in by_id["c"].error
    assert by_id["a"].ok and by_id["d"].ok
    assert len(done) == 4
    figures = summarize(result.timings, result.duration_s)
    assert (figures.completed, figures.failed) == (2, 2)


@pytest.mark.parametrize(
    "arrival",
    [ArrivalSpec(mode="closed", concurrency=4), ArrivalSpec(mode="poisson", rate=1000.0, seed=0)],
    ids=["closed", "poisson"],
)
def test_a_turn_is_sent_only_after_the_previous_turn_of_its_session_completed(arrival: ArrivalSpec) -> None:
    server = FakeOpenAIServer(first_s=0.01, gap_s=0.005)
    result = server.run(_sessions(4, 3), arrival)
    assert len(result.timings) == 12 and all(t.ok for t in result.timings)
    assert server.max_in_flight > 1, "sessions should run concurrently"
    position = {event: i for i, event in enumerate(server.events)}
    for j in range(4):
        for k in range(1, 3):
            assert position[("end", f"s{j} q{k - 1}")] < position[("start", f"s{j} q{k}")]


def test_think_time_waits_after_the_previous_turn_completed() -> None:
    server = FakeOpenAIServer(first_s=0.01, gap_s=0.005)
    result = server.run(_sessions(1, 2, think_time=0.1), ArrivalSpec(mode="closed", concurrency=1))
    first, second = sorted(result.timings, key=lambda t: t.sent)
    assert first.latency is not None
    assert second.sent >= first.sent + first.latency + 0.095


def test_timestamps_are_replayed_at_the_asked_speed() -> None:
    server = FakeOpenAIServer()
    wl = _workload(_prompt(0, "early", timestamp=5.0), _prompt(1, "late", timestamp=5.4))
    result = server.run(wl, ArrivalSpec(mode="timestamps", speed=2.0))
    by_id = {t.request_id: t for t in result.timings}
    assert by_id["late"].scheduled == pytest.approx(0.2)
    assert by_id["late"].sent >= 0.195
    assert by_id["early"].scheduled == 0.0


def test_actual_history_puts_each_real_output_into_the_next_turns_assistant_messages() -> None:
    server = FakeOpenAIServer(first_s=0.005, gap_s=0.001)
    server.run(_sessions(2, 3), ArrivalSpec(mode="closed", concurrency=2), history="actual")
    for j in range(2):
        third = server.requests[f"s{j} q2"][1]["messages"]
        assert [m["content"] for m in third if m["role"] == "assistant"] == [
            FakeOpenAIServer.answer(f"s{j} q0"),
            FakeOpenAIServer.answer(f"s{j} q1"),
        ]
        assert [m["content"] for m in third if m["role"] == "user"] == [f"s{j} q0", f"s{j} q1", f"s{j} q2"]


def test_recorded_history_sends_the_file_s_assistant_messages() -> None:
    server = FakeOpenAIServer(first_s=0.005, gap_s=0.001)
    server.run(_sessions(1, 2), ArrivalSpec(mode="closed", concurrency=1), history="recorded")
    second = server.requests["s0 q1"][1]["messages"]
    assert [m["content"] for m in second if m["role"] == "assistant"] == ["rec s0 0"]


def test_failed_requests_keep_their_status_and_the_start_of_the_body() -> None:
    too_long = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens. However, you requested "
                + "4100 tokens (100 in the messages, 4000 in the completion). "
                + "Please reduce the length of the messages or completion. " * 10,
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
    )
    server = FakeOpenAIServer(reject={"long": (400, too_long)}, stream_error={"dies"}, refuse={"gone"})
    wl = _workload(_prompt(0, "long"), _prompt(1, "dies"), _prompt(2, "gone"), _prompt(3, "fine"))
    by_id = {t.request_id: t for t in server.run(wl, ArrivalSpec(mode="closed", concurrency=1)).timings}

    long = by_id["long"]
    assert long.status == 400 and not long.ok
    assert long.error == "HTTP 400: " + too_long[:300]  # an excerpt, not the whole body
    assert long.failure_reason is not None
    assert long.failure_reason.startswith("HTTP 400: This model's maximum context length is 2048 tokens.")
    dies = by_id["dies"]
    assert dies.status == 200 and not dies.ok
    assert dies.failure_reason == "stream error: EngineDeadError: engine core died"
    assert by_id["gone"].status is None and by_id["gone"].failure_reason == "ConnectError: connection refused"
    assert by_id["fine"].status == 200 and by_id["fine"].failure_reason is None


def test_in_flight_requests_never_exceed_the_limit_and_late_requests_are_reported() -> None:
    server = FakeOpenAIServer(first_s=0.05, gap_s=0.0)
    wl = _workload(*(_prompt(i, f"r{i}", timestamp=0.0) for i in range(20)))
    result = server.run(wl, ArrivalSpec(mode="timestamps"), max_in_flight=4)

    assert len(result.timings) == 20 and all(t.ok for t in result.timings)
    assert server.max_in_flight == 4 and result.peak_in_flight == 4 and result.max_in_flight == 4
    # 5 waves of 4 requests of ~50 ms: the last wave left ~200 ms after its planned time
    assert result.lag_p99_ms >= 150.0 and result.lag_max_ms >= result.lag_p99_ms
    assert result.behind_schedule and "behind its schedule" in result.schedule_note
    # the lag was spent waiting for a slot: the server, not the replayer, was too slow
    assert "waiting for an in-flight slot" in result.schedule_note
    assert (
        all(t.slot_wait > 0.0 for t in result.timings[4:])
        and max(t.slot_wait for t in result.timings[:4]) == 0.0
    )
    figures = summarize(result.timings, result.duration_s)
    assert figures.behind_schedule and figures.lag_p99_ms == pytest.approx(result.lag_p99_ms)
    assert figures.schedule_note == result.schedule_note
    assert figures.lag_max_ms == pytest.approx(result.lag_max_ms)
    assert figures.lag_tolerance_ms == pytest.approx(result.lag_tolerance_ms)
    assert 5.0 <= result.lag_tolerance_ms < 8.0  # a tenth of the TTFT, ~50 ms


def _paced(n: int, gap_s: float) -> Workload:
    return _workload(*(_prompt(i, f"r{i}", timestamp=i * gap_s) for i in range(n)))


def test_a_replay_that_keeps_its_schedule_is_not_flagged() -> None:
    # 20 requests 50 ms apart, TTFT ~300 ms: up to 30 ms of lag allowed (a tenth of the TTFT). On a
    # quiet machine the lag stays under ~6 ms; a machine busy with other test runs can stall this
    # process for 50 ms, which is real lag, so one of three runs has to keep its schedule.
    for _ in range(3):
        server = FakeOpenAIServer(first_s=0.3, gap_s=0.0)
        result = server.run(_paced(20, 0.05), ArrivalSpec(mode="timestamps"))
        assert all(t.ok for t in result.timings)
        assert result.lag_tolerance_ms == pytest.approx(30.0, rel=0.1)
        if not result.behind_schedule:
            break
    assert not result.behind_schedule and result.schedule_note == "", result.schedule_note
    assert not summarize(result.timings, result.duration_s).behind_schedule


def test_a_replay_whose_event_loop_was_blocked_is_flagged_as_the_replayers_own_lag() -> None:
    # the same schedule, but answering r5 blocks the event loop for 300 ms (as a CPU-bound step of
    # the tuner would): the requests due meanwhile leave up to ~300 ms late with slots to spare
    server = FakeOpenAIServer(first_s=0.3, gap_s=0.0)
    handler = server.handler

    async def blocking(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["prompt"] == "r5":
            time.sleep(0.3)
        return await handler(request)

    server.handler = blocking  # type: ignore[method-assign]
    result = server.run(_paced(20, 0.05), ArrivalSpec(mode="timestamps"))
    assert all(t.ok for t in result.timings)
    assert result.behind_schedule and result.lag_max_ms >= 200.0
    assert "the replayer itself was late" in result.schedule_note
    assert all(t.slot_wait == 0.0 for t in result.timings)
    assert summarize(result.timings, result.duration_s).behind_schedule


def test_events_split_anywhere_with_any_line_ends_are_read_whole() -> None:
    events = (
        b'data: {"choices":[{"index":0,"text":"he"}]}\r\n\r\n'
        b'data: {"choices":[{"index":0,"text":"llo"}]}\r\r'
        b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n'
        b"data: [DONE]"  # no line end at all before the body ends
    )

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(events), 7):
            yield events[i : i + 7]

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pieces())

    server = FakeOpenAIServer()
    server.handler = handler  # type: ignore[method-assign]
    (t,) = server.run(_workload(_prompt(0, "hello")), ArrivalSpec(mode="closed", concurrency=1)).timings
    assert t.ok and len(t.itl) == 1 and (t.output_tokens, t.prompt_tokens) == (2, 4)


def test_cancelling_a_replay_cancels_its_requests_and_leaves_no_task() -> None:
    server = FakeOpenAIServer(first_s=30.0)  # no request would finish before the test's timeout
    wl = _workload(*(_prompt(i, f"r{i}", timestamp=0.0) for i in range(5000)))

    async def go() -> tuple[float, int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server.handler)) as client:
            task = asyncio.ensure_future(
                replay(client, TARGET, wl, ArrivalSpec(mode="timestamps"), max_in_flight=64)
            )
            while server.in_flight < 64:
                await asyncio.sleep(0.01)
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            waited = time.monotonic() - t0
            return waited, len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

    waited, left = asyncio.run(go())
    assert left == 0
    assert waited < 1.0
    assert len(server.requests) == 64  # the other 4,936 were never sent


def test_an_error_in_the_callers_callback_stops_the_replay_as_itself() -> None:
    server = FakeOpenAIServer(first_s=0.001, gap_s=0.0)
    wl = _workload(*(_prompt(i, f"r{i}", timestamp=0.0) for i in range(50)))

    def on_done(t: RequestTiming) -> None:
        raise ValueError(f"callback broke on {t.request_id}")

    async def go() -> int:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server.handler)) as client:
            with pytest.raises(ValueError, match="callback broke"):
                await replay(
                    client, TARGET, wl, ArrivalSpec(mode="timestamps"), on_done=on_done, max_in_flight=8
                )
            return len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

    assert asyncio.run(go()) == 0
    assert len(server.requests) < 50


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        FakeOpenAIServer().run(
            _workload(_prompt(0, "a")), ArrivalSpec(mode="closed", concurrency=1), max_in_flight=0
        )


def test_an_error_while_the_scheduler_waits_for_the_next_arrival_is_raised_at_once() -> None:
    server = FakeOpenAIServer(first_s=0.001, gap_s=0.0)
    wl = _workload(_prompt(0, "now", timestamp=0.0), _prompt(1, "in an hour", timestamp=3600.0))

    def on_done(t: RequestTiming) -> None:
        raise ValueError("callback broke")

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="callback broke"):
        server.run(wl, ArrivalSpec(mode="timestamps"), on_done=on_done)
    assert time.monotonic() - t0 < 5.0
    assert list(server.requests) == ["now"]


def test_a_request_the_server_refuses_is_named_by_its_file_line_and_id() -> None:
    """Issue 30: one empty prompt got HTTP 400 in every trial and nothing said which line it was."""
    empty = json.dumps(
        {
            "error": {
                "message": "Either prompt or prompt_embeds must be provided and non-empty.",
                "type": "BadRequestError",
                "code": 400,
            }
        }
    )
    server = FakeOpenAIServer(
        reject={"bad": (400, empty), "bad2": (400, empty), "nokey": (401, "Unauthorized")}
    )
    q_empty = WorkloadRequest(index=1, line=7, id="q-empty", max_tokens=3, prompt="bad")
    wl = _workload(_prompt(0, "fine"), q_empty, _prompt(2, "nokey"))

    result = server.run(wl, ArrivalSpec(mode="closed", concurrency=1))

    by_id = {t.request_id: t for t in result.timings}
    assert by_id["q-empty"].source == "w.jsonl:7" and by_id["fine"].source == "w.jsonl:1"
    failures = summarize(result.timings, result.duration_s).failures
    assert failures == {
        "HTTP 400: Either prompt or prompt_embeds must be provided and non-empty. (at w.jsonl:7, id 'q-empty')": 1,
        "HTTP 401: Unauthorized": 1,  # the key, not the request: no line to fix
    }

    twice = _workload(q_empty, WorkloadRequest(index=1, line=9, id="q9", max_tokens=3, prompt="bad2"))
    again = server.run(twice, ArrivalSpec(mode="closed", concurrency=1))
    (reason,) = summarize(again.timings, again.duration_s).failures
    assert reason.endswith("(first at w.jsonl:7, id 'q-empty')")
