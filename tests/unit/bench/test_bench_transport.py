"""The replayer's transport (aiohttp behind httpx's seam) against a scripted server on a real
socket, through both of its doors: an ``httpx.AsyncClient`` on :class:`AiohttpTransport` (what
/metrics, /v1/models and warm-up use) and :meth:`ReplayClient.post_stream` (the replayer's own
POSTs). Bodies framed by length, chunks or the end of the connection; kept-alive connections reused,
and replaced when the server closed them (a POST too); aiohttp's failures as httpx's errors and
timeouts; the limit on requests at once; cancellation closes the connection and frees the place."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Literal

import httpx
import pytest

from autotune.bench import AiohttpTransport, ArrivalSpec, ReplayClient, ReplayTarget, replay, replay_client
from autotune.workload import Workload, WorkloadRequest

Answer = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]  # keep it open?


class ScriptedServer:
    """Answers each request with ``answer(request_bytes, reader, writer)``; counts connections and
    requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                if b"transfer-encoding: chunked" in head.lower():
                    body = await reader.readuntil(b"0\r\n\r\n")
                self.requests.append(head + body)
                if not await self.answer(head + body, reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


def _fixed(status: int, body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n%s\r\n%s" % (status, len(body), extra, body)


async def _ok(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(_fixed(200, b"hello"))
    return True


def _client(max_connections: int = 8, read_s: float = 5.0) -> httpx.AsyncClient:
    transport = AiohttpTransport(max_connections)
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(read_s, connect=5.0))


Door = Literal["httpx", "replay"]
DOORS = pytest.mark.parametrize("door", ["httpx", "replay"])


def _door(
    door: Door, max_connections: int = 8, read_s: float = 5.0
) -> tuple[httpx.AsyncClient, AiohttpTransport]:
    """A client through httpx's client layer, or the replay client whose POSTs skip it."""
    timeout = httpx.Timeout(read_s, connect=5.0)
    if door == "replay":
        client = replay_client(max_in_flight=max_connections, timeout=timeout)
        return client, client.replay_transport
    transport = AiohttpTransport(max_connections)
    return httpx.AsyncClient(transport=transport, timeout=timeout), transport


async def _post(client: httpx.AsyncClient, url: str) -> tuple[int, bytes]:
    """POST a small JSON body through the client's door; the status and the whole answer."""
    if isinstance(client, ReplayClient):
        async with client.post_stream(url, b'{"n":1}', {"Content-Type": "application/json"}) as answer:
            return answer.status_code, await answer.aread()
    response = await client.post(url, content=b'{"n":1}', headers={"Content-Type": "application/json"})
    return response.status_code, response.content


def test_a_kept_alive_connection_serves_the_next_requests_and_the_request_is_sent_as_given() -> None:
    async def go() -> tuple[list[str], ScriptedServer]:
        async with ScriptedServer(_ok) as server, _client() as client:
            texts = []
            for i in range(3):
                r = await client.post(server.url + f"/v1/x?i={i}", json={"n": i}, headers={"X-A": "b"})
                texts.append(r.text)
            return texts, server

    texts, server = asyncio.run(go())
    assert texts == ["hello"] * 3
    assert server.connections == 1
    head, _, body = server.requests[2].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/x?i=2 HTTP/1.1\r\n")
    assert b"\r\nx-a: b" in head.lower() and f"host: 127.0.0.1:{server.port}".encode() in head.lower()
    assert json.loads(body) == {"n": 2}


def test_chunked_bodies_arriving_a_byte_at_a_time_with_extensions_and_trailers_are_read_whole() -> None:
    chunked = b"5;ext=1\r\nhello\r\n1\r\n,\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"

    async def trickle(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(len(chunked)):
            writer.write(chunked[i : i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    async def go() -> tuple[list[bytes], ScriptedServer]:
        async with ScriptedServer(trickle) as server, _client() as client:
            bodies = [(await client.get(server.url)).content for _ in range(2)]
            return bodies, server

    bodies, server = asyncio.run(go())
    assert bodies == [b"hello, world"] * 2
    assert server.connections == 1  # read to its end: the connection was reused


def test_a_body_that_ends_with_the_connection_and_connection_close_open_new_connections() -> None:
    async def until_close(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if b"/close" in request:
            writer.write(_fixed(200, b"closing", b"connection: close\r\n"))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nall of it")
        return False

    async def go() -> tuple[list[str], ScriptedServer]:
        async with ScriptedServer(until_close) as server, _client() as client:
            texts = [(await client.get(server.url + path)).text for path in ("/a", "/close", "/b")]
            return texts, server

    texts, server = asyncio.run(go())
    assert texts == ["all of it", "closing", "all of it"]
    assert server.connections == 3


@DOORS
def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_post_answered(door: Door) -> None:
    # the server drops every connection on its second request unanswered (as an idle timeout
    # closing a connection just as the client reuses it); aiohttp alone resends only GETs and the
    # like, and the replayer POSTs
    async def once_per_connection(
        request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        served = getattr(writer, "served", 0)
        if served:
            return False
        writer.served = 1  # type: ignore[attr-defined]
        writer.write(_fixed(200, b"ok"))
        return True

    async def go() -> tuple[list[tuple[int, bytes]], ScriptedServer, int]:
        client, transport = _door(door)
        async with ScriptedServer(once_per_connection) as server, client:
            answers = [await _post(client, server.url) for _ in range(3)]
            return answers, server, transport.in_flight

    answers, server, in_flight = asyncio.run(go())
    assert answers == [(200, b"ok")] * 3
    assert server.connections == 3 and in_flight == 0


@DOORS
def test_errors_are_httpx_errors_and_give_their_slot_back(door: Door) -> None:
    async def misbehave(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if b"/short" in request:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
            return False
        if b"/garbage" in request:
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            return False
        if b"/silent" in request:
            await asyncio.sleep(1.0)
            return False
        writer.write(_fixed(200, b"fine"))
        return True

    async def go() -> tuple[list[str], int, tuple[int, bytes]]:
        client, transport = _door(door, max_connections=2, read_s=0.2)
        errors = []
        async with ScriptedServer(misbehave) as server, client:
            for path in ("/short", "/garbage", "/silent"):
                with pytest.raises(httpx.HTTPError) as caught:
                    await _post(client, server.url + path)
                errors.append(type(caught.value).__name__)
            in_flight = transport.in_flight
            fine = await _post(client, server.url + "/fine")  # the 2 slots were given back
        return errors, in_flight, fine

    errors, in_flight, fine = asyncio.run(go())
    assert errors == ["RemoteProtocolError", "RemoteProtocolError", "ReadTimeout"]
    assert in_flight == 0 and fine == (200, b"fine")


def test_a_refused_connection_is_a_connect_error() -> None:
    async def go() -> None:
        async with ScriptedServer(_ok) as server:
            url = server.url
        async with _client() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(url)

    asyncio.run(go())


def test_no_more_requests_at_once_than_the_limit_and_interim_answers_are_skipped() -> None:
    async def slow(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0.05)
        writer.write(_fixed(200, b"done"))
        return True

    async def go() -> tuple[list[str], ScriptedServer]:
        async with ScriptedServer(slow) as server, _client(max_connections=3) as client:
            answers = await asyncio.gather(*(client.get(server.url) for _ in range(10)))
            return [a.text for a in answers], server

    texts, server = asyncio.run(go())
    assert texts == ["done"] * 10
    assert server.most_open == 3 and server.connections == 3


def test_a_request_body_of_unknown_length_is_sent_chunked() -> None:
    async def parts() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    async def go() -> bytes:
        async with ScriptedServer(_ok) as server, _client() as client:
            await client.post(server.url, content=parts())
            return server.requests[0]

    sent = asyncio.run(go())
    assert b"transfer-encoding: chunked" in sent.lower()
    assert sent.endswith(b"\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n")  # each part as it came


def _sse_answer(events: list[bytes]) -> Answer:
    async def answer(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for event in events:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        return True

    return answer


def _workload(n: int) -> Workload:
    reqs = tuple(
        WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=2, prompt=f"q{i}", timestamp=0.0)
        for i in range(n)
    )
    return Workload(path=Path("w.jsonl"), requests=reqs)


@DOORS
def test_a_replay_over_the_transport_times_streamed_tokens_and_reuses_connections(door: Door) -> None:
    def event(obj: object) -> bytes:
        return b"data: " + json.dumps(obj).encode() + b"\r\n\r\n"  # CRLF line ends, as some servers

    events = [
        event({"choices": [{"index": 0, "text": "a"}]}),
        event({"choices": [{"index": 0, "text": "b"}]}),
        event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        b"data: [DONE]\r\n\r\n",
    ]

    async def go() -> tuple[list[float | None], list[int], ScriptedServer, int]:
        client, transport = _door(door, max_connections=2)
        async with ScriptedServer(_sse_answer(events)) as server, client:
            result = await replay(
                client,
                ReplayTarget(server.url, "m", api_key="k"),
                _workload(6),
                ArrivalSpec("timestamps"),
                max_in_flight=2,
            )
            return (
                [t.ttft for t in result.timings],
                [t.output_tokens for t in result.timings],
                server,
                transport.in_flight,
            )

    ttfts, tokens, server, in_flight = asyncio.run(go())
    assert all(t is not None and t >= 0.0 for t in ttfts) and tokens == [2] * 6
    assert server.connections == 2 and in_flight == 0
    for sent in server.requests:  # each request as vLLM expects it
        head, _, body = sent.partition(b"\r\n\r\n")
        lines = head.lower().split(b"\r\n")
        assert lines[0] == b"post /v1/completions http/1.1"
        assert b"authorization: bearer k" in lines and b"content-type: application/json" in lines
        assert json.loads(body)["model"] == "m" and json.loads(body)["stream"] is True


@DOORS
def test_cancelling_a_streaming_request_closes_its_connection_and_frees_its_slot(door: Door) -> None:
    async def endless(request: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await asyncio.wait_for(reader.read(), 30)  # until the client closes the connection
        return False

    async def go() -> tuple[int, int]:
        client, transport = _door(door, max_connections=4)
        async with ScriptedServer(endless) as server:
            async with client:

                async def read() -> None:
                    if isinstance(client, ReplayClient):
                        async with client.post_stream(server.url, b"{}", {}) as answer:
                            async for _ in answer.aiter_bytes():
                                pass
                    else:
                        async with client.stream("GET", server.url) as r:
                            async for _ in r.aiter_bytes():
                                pass

                task = asyncio.ensure_future(read())
                while transport.in_flight == 0:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                in_flight = transport.in_flight
            await asyncio.sleep(0.05)  # the server sees the connection end
            return in_flight, server.open_now

    in_flight, still_open = asyncio.run(go())
    assert in_flight == 0 and still_open == 0
