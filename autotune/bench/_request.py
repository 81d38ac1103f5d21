"""One streamed request: send it, read its server-sent events, time it.

The stream is read as bytes and split into lines here (``data: {...}`` per event, as vLLM's
OpenAI server writes them), not through httpx's text and line decoders: at hundreds of requests a
second the replayer's CPU per request bounds how many it can send on time (issue 14). Each event
is parsed as JSON once; the first event with choices is the first token. With the tool's own
client (:class:`autotune.bench.ReplayClient`) the request goes to its aiohttp transport directly,
past httpx's client layer (half of a request's CPU, :mod:`autotune.bench._transport`); any other
``httpx.AsyncClient`` (tests pass mock transports) is used as it is. Both raise httpx's errors.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from autotune.bench._timing import RequestTiming
from autotune.bench._transport import ReplayClient
from autotune.workload import WorkloadRequest

__all__ = ["ReplayTarget", "send_request"]

_ERROR_EXCERPT = 300  # characters of a failed request's body kept in its timing


@dataclass(frozen=True)
class ReplayTarget:
    base_url: str
    model: str
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@functools.lru_cache(maxsize=64)
def _url(base_url: str, path: str) -> httpx.URL:
    """Parsed once per target: httpx would parse the string (and its host) on every request."""
    return httpx.URL(base_url + path)


def _body(
    req: WorkloadRequest, model: str, messages: list[dict[str, str]] | None
) -> tuple[str, dict[str, Any]]:
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if req.prompt is not None:
        return "/v1/completions", {**common, "prompt": req.prompt}
    return "/v1/chat/completions", {**common, "messages": messages}


def _chunk_text(obj: dict[str, Any]) -> str:
    choice = obj["choices"][0]
    if "text" in choice:
        return str(choice.get("text") or "")
    return str((choice.get("delta") or {}).get("content") or "")


class _Events:
    """What the events of one answer said, in the order they came."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ttft: float | None = None
        self.last = start
        self.itl: list[float] = []
        self.text: list[str] = []
        self.out_tokens = 0
        self.prompt_tokens: int | None = None
        self.error: str | None = None

    def line(self, line: bytes) -> bool:
        """Take one line of the stream; False once the stream reported an error."""
        if not line.startswith(b"data:"):
            return True
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        obj = json.loads(data)
        if obj.get("error"):  # vLLM reports a failure after the 200 inside the stream
            self.error = "stream error: " + data.decode(errors="replace")[:_ERROR_EXCERPT]
            return False
        if obj.get("choices"):
            now = time.perf_counter()
            if self.ttft is None:
                self.ttft = now - self.start
            else:
                self.itl.append(now - self.last)
            self.last = now
            self.text.append(_chunk_text(obj))
        usage = obj.get("usage")
        if usage:
            self.out_tokens = int(usage.get("completion_tokens") or 0)
            self.prompt_tokens = usage.get("prompt_tokens")
        return True


class _Answer(Protocol):
    """What is read of an answer: ``httpx.Response`` or the replay client's ``StreamedAnswer``."""

    @property
    def status_code(self) -> int: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...


async def _read_events(resp: _Answer, events: _Events) -> None:
    pending = b""
    async for chunk in resp.aiter_bytes():
        if b"\r" in chunk:  # CRLF or CR line ends (the event-stream format allows all three)
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = (pending + chunk).split(b"\n") if pending else chunk.split(b"\n")
        pending = lines.pop()
        for line in lines:
            if not events.line(line):
                return
    # Read on to the end of the body (it ends after "data: [DONE]"): a response left unread
    # closes its connection, and every request would open a new one.
    if pending:
        events.line(pending)


async def send_request(
    client: httpx.AsyncClient,
    target: ReplayTarget,
    req: WorkloadRequest,
    messages: list[dict[str, str]] | None,
    *,
    t0: float,
    scheduled: float,
    slot_wait: float = 0.0,
    source: str | None = None,
) -> tuple[RequestTiming, str]:
    """Send ``req`` (streaming) and time its answer; ``scheduled`` and the send time are seconds
    from ``t0``; ``slot_wait``: how long it waited for an in-flight slot; ``source``: the request's
    ``<workload file>:<line>``, kept in its timing so that a refused request can be named. A failure is data
    (``RequestTiming.error``), never an exception. Also returns the answer's text."""
    path, body = _body(req, target.model, messages)
    st = time.perf_counter()
    events = _Events(st)
    status: int | None = None
    answer: AbstractAsyncContextManager[_Answer]
    if isinstance(client, ReplayClient):  # the tool's client: straight to its transport
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        headers = {"Content-Type": "application/json", **target.headers()}
        answer = client.post_stream(target.base_url + path, content, headers)
    else:  # any other httpx client (tests pass mock transports)
        answer = client.stream("POST", _url(target.base_url, path), json=body, headers=target.headers())
    try:
        async with answer as resp:
            status = resp.status_code
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:_ERROR_EXCERPT]
                events.error = f"HTTP {resp.status_code}: {detail}"
            else:
                await _read_events(resp, events)
                if events.ttft is None and events.error is None:
                    events.error = "stream ended without output"
    except (httpx.HTTPError, json.JSONDecodeError, OSError) as exc:
        events.error = f"{type(exc).__name__}: {exc}"
    ttft = events.ttft
    timing = RequestTiming(
        request_id=req.id,
        session=req.session_id,
        scheduled=scheduled,
        sent=st - t0,
        ttft=ttft,
        latency=(events.last - st) if ttft is not None else None,
        itl=tuple(events.itl),
        output_tokens=events.out_tokens or (len(events.itl) + 1 if ttft is not None else 0),
        prompt_tokens=events.prompt_tokens,
        error=events.error,
        status=status,
        slot_wait=slot_wait,
        source=source,
    )
    return timing, "".join(events.text)
