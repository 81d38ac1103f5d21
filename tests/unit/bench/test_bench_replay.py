"""Replay against an in-process OpenAI-compatible server (httpx.MockTransport) that streams SSE."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Collection
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
    ``NAME`` is ``A(NAME)``. Names in ``fail`` get HTTP 500, names in ``refuse`` a connection error.
    """

    def __init__(
        self,
        *,
        first_s: float = 0.02,
        gap_s: float = 0.01,
        fail: Collection[str] = (),
        refuse: Collection[str] = (),
    ) -> None:
        self.first_s = first_s
        self.gap_s = gap_s
        self.fail = fail
        self.refuse = refuse
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
