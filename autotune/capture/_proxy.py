"""An OpenAI-compatible pass-through in front of vLLM that hands each request to a recorder.

Every request (any method, any path: chat, completions, models, health, metrics) is forwarded to
the upstream as it came; the response is streamed back byte for byte (each chunk as it arrives: no
decoding, no re-encoding) with its status and headers, less the hop-by-hop ones. POSTs to
``/v1/chat/completions`` and ``/v1/completions`` are submitted to the recorder once the upstream has
answered with a status below 400: a non-blocking queue put of the raw body, nothing parsed here.
Recording can fail in any way without the client seeing it.

The app is plain ASGI (served by uvicorn) over the project's aiohttp transport
(:class:`autotune.bench.AiohttpTransport`, the replayer's): no framework between the two sockets.
A Starlette route and an ``httpx.AsyncClient`` before it added 4.0 ms p50 to TTFT at 50 req/s
against a stub upstream on 2 cores (benchmarks/capture_overhead.py, RESULTS.md "Issue 29"); httpx's
client stack alone cost ~1 ms of CPU a request there (bench/_transport.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import aiohttp
import httpx

from autotune.bench import AiohttpTransport
from autotune.capture._records import CapturedRequest

__all__ = ["RECORDED_PATHS", "Recorder", "capture_app"]

log = logging.getLogger(__name__)

RECORDED_PATHS = ("/v1/chat/completions", "/v1/completions")
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
_MAX_CONNECTIONS = 4096  # kept-alive connections to the upstream, at most

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Recorder(Protocol):
    def submit(self, req: CapturedRequest) -> None: ...


def _request_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The client's headers for the upstream, less the hop-by-hop ones (aiohttp sets Host and
    Content-Length for the body it sends)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw if k.lower() not in _HOP_BY_HOP]


def _response_headers(raw: tuple[tuple[bytes, bytes], ...]) -> list[tuple[bytes, bytes]]:
    """The upstream's headers for the client: hop-by-hop ones dropped, Content-Length kept (the body
    goes back as it came; uvicorn frames a body without one as chunked)."""
    drop = _HOP_BY_HOP - {b"content-length"}
    return [(k, v) for k, v in raw if k.lower() not in drop]


async def _on_disconnect(receive: Receive, response: aiohttp.ClientResponse) -> None:
    """Close the upstream answer when the client goes away, so vLLM aborts the request (it does
    when its own client disconnects) instead of generating for nobody."""
    while (await receive())["type"] != "http.disconnect":
        pass
    response.close()


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client went away before its request was read")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class _Proxy:
    """The ASGI app: ``lifespan`` opens and closes the upstream transport, ``http`` forwards."""

    def __init__(self, upstream: str, recorder: Recorder) -> None:
        self.upstream = upstream.rstrip("/")
        self.recorder = recorder
        self.transport = AiohttpTransport(_MAX_CONNECTIONS)
        self.timeout = self.transport.client_timeout(10.0, None)  # connect; a stream may idle long

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._forward(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.transport.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _url(self, scope: Scope) -> str:
        """The upstream's URL for the request: its raw path and query as the client sent them."""
        query: bytes = scope.get("query_string", b"")
        target: bytes = scope.get("raw_path") or scope["path"].encode()
        return self.upstream + target.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")

    def _record(self, scope: Scope, arrival: float, path: str, body: bytes) -> None:
        """Hand the request (with its session, from ``X-Session-Id``) to the recorder; never fails."""
        try:
            session = dict(scope["headers"]).get(b"x-session-id", b"").decode("latin-1") or None
            self.recorder.submit(CapturedRequest(arrival=arrival, path=path, body=body, session=session))
        except Exception:  # never fail a request because recording failed
            log.exception("capture: recorder refused a request")

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = time.time()
        try:
            body = await _body(receive)
        except ConnectionResetError:
            return
        path, method = scope["path"], scope["method"]
        try:
            response = await self.transport.send(
                method,
                self._url(scope),
                body,
                _request_headers(scope["headers"]),
                self.timeout,
                decompress=False,
                exact_headers=True,
            )
        except httpx.HTTPError as exc:
            log.warning("capture: upstream %s unreachable: %s", self.upstream, exc)
            await _bad_gateway(send, exc)
            return
        if method == "POST" and path in RECORDED_PATHS and response.status < 400:
            self._record(scope, arrival, path, body)
        watch = asyncio.create_task(_on_disconnect(receive, response))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": _response_headers(response.raw_headers),
                }
            )
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            # the upstream broke off, or the client went away: the client's answer ends unfinished
            log.info("capture: %s %s ended early: %s", method, path, type(exc).__name__)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            if response.content.at_eof():
                response.release()  # the connection goes back to the pool
            else:
                response.close()


async def _bad_gateway(send: Send, exc: Exception) -> None:
    """A 502 for the client, naming the error that kept the upstream from answering."""
    message = f'{{"error": "upstream unreachable: {type(exc).__name__}"}}'.encode()
    await send(
        {
            "type": "http.response.start",
            "status": 502,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": message})


def capture_app(upstream: str, recorder: Recorder) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The proxy as an ASGI app (uvicorn serves it; its lifespan closes the upstream connections)."""
    return _Proxy(upstream, recorder)
