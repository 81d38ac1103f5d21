"""The replayer's HTTP transport: aiohttp's client behind httpx's transport seam.

httpx's default transport sends a request through httpcore, anyio and h11. On 2 cores against the
fake server that stack was ~90% of the replayer's CPU (py-spy, issue 14: anyio's cancel scopes,
h11's state machine, httpcore's pool bookkeeping), 1.1-1.2 ms per request, so the replayer sent at
most ~600-950 requests/s. httpcore's pool also re-examines every connection each time a request
starts or ends (httpcore 1.0.9, ``AsyncConnectionPool._assign_requests_to_connections``): with
1024 connections in one pool a request cost 10-14 ms (issue 17). aiohttp parses HTTP/1.1 in C
(llhttp) and keeps idle connections per origin in a queue, so a request costs about the same with
1 or 1024 connections open.

:class:`AiohttpTransport` sends each request of an ``httpx.AsyncClient`` on one
``aiohttp.ClientSession``: the client, its timeouts, its errors and the response objects stay
httpx's, so callers and tests see only httpx. At most ``max_connections`` requests at once (a
request holds its place until its response body is closed; more wait, up to httpx's pool
timeout); httpx's connect and read timeouts become aiohttp's ``sock_connect`` and ``sock_read``;
aiohttp's exceptions become httpx's (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``...).
aiohttp does not decompress there (httpx decodes ``Content-Encoding`` itself), keeps no cookies,
reads no proxies from the environment and follows no redirects (httpx's client decides).

:class:`ReplayClient` (made by :func:`replay_client`) is that ``httpx.AsyncClient`` plus
:meth:`ReplayClient.post_stream`, which the replayer uses for its own streamed POSTs: straight to
the transport, past httpx's client layer (request building, auth and redirect wrappers, cookie
extraction). That layer cost ~250 us of CPU a request on 2 cores against ~300 us for all the rest
of a replayed request; without it the replayer sends as fast as with the hand-written HTTP/1.1
client this module held before (benchmarks/results/issue14-replay.md; ``--client seam`` of
benchmarks/replay_scale.py sends every request through httpx's client layer, for comparison).

Kept-alive connections: vLLM's server (uvicorn) closes a connection idle for
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` = 5 s (vllm/envs.py, vLLM 0.32); aiohttp drops its idle ones
after 4 s, before the server does. A request that meets a connection closed all the same before
any answer came (``ServerDisconnectedError``: the close and the request crossed) is sent once more
on a new connection, whatever its method (aiohttp resends only idempotent ones, and the replayer
POSTs; a replayed request is safe to resend).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import httpx

__all__ = ["AiohttpTransport", "ReplayClient", "StreamedAnswer", "replay_client"]

# Below vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s): the client drops an idle connection first.
KEEPALIVE_S = 4.0


def httpx_error(exc: BaseException) -> httpx.TransportError:
    """aiohttp's exception (or asyncio's timeout) as the httpx exception httpx's own transport
    would raise for the same failure."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, asyncio.TimeoutError):  # aiohttp's SocketTimeoutError, a sock_read timeout
        return httpx.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unknown host, TLS handshake
        return httpx.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientResponseError):  # a response aiohttp's parser rejected
        return httpx.RemoteProtocolError(f"{message} (status line or headers)")
    if isinstance(exc, aiohttp.ClientOSError | OSError):
        return httpx.ReadError(message)
    return httpx.TransportError(message)


_CAUGHT = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding")  # what aiohttp adds when a request lacks them


class _Body(httpx.AsyncByteStream):
    """An aiohttp response's body as it arrives. Closing it gives the connection back to aiohttp's
    pool when the body was read to its end (aiohttp closes it otherwise), then the place."""

    def __init__(self, response: aiohttp.ClientResponse, on_close: Callable[[], None]) -> None:
        self._response = response
        self._on_close: Callable[[], None] | None = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        try:
            while chunk := await content.readany():
                yield chunk
        except _CAUGHT as exc:
            raise httpx_error(exc) from exc

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is None:
            return
        try:
            if self._response.content.at_eof():
                self._response.release()
            else:  # not read to its end (cancelled, an error): the connection cannot be reused
                self._response.close()
        finally:
            on_close()


class StreamedAnswer:
    """A response of :meth:`ReplayClient.post_stream`: the part of ``httpx.Response`` the replayer
    reads (status, body as it arrives, whole body), its errors httpx's."""

    def __init__(self, response: aiohttp.ClientResponse, body: _Body) -> None:
        self.status_code = response.status
        self._body = body

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        return self._body.__aiter__()

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self._body])


class _PostStream:
    """``async with``: a POST sent and its answer open; on exit the answer is closed."""

    def __init__(
        self,
        transport: AiohttpTransport,
        url: str,
        content: bytes,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
    ) -> None:
        self._transport, self._url, self._content, self._headers = transport, url, content, headers
        self._timeout = timeout
        self._body: _Body | None = None

    async def __aenter__(self) -> StreamedAnswer:
        transport, timeout = self._transport, self._timeout
        await transport.acquire(timeout.pool)
        try:
            response = await transport.send(
                "POST",
                self._url,
                self._content,
                self._headers,
                transport.client_timeout(timeout.connect, timeout.read),
                decompress=True,  # no httpx behind to decode Content-Encoding
            )
        except BaseException:
            transport.release()
            raise
        self._body = _Body(response, transport.release)
        return StreamedAnswer(response, self._body)

    async def __aexit__(self, *exc: object) -> None:
        if self._body is not None:
            await self._body.aclose()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """At most ``max_connections`` requests at once over kept-alive HTTP/1.1 connections of one
    ``aiohttp.ClientSession`` (made on first use, in the running event loop); ``verify`` as
    httpx's (for https)."""

    def __init__(self, max_connections: int, *, verify: ssl.SSLContext | bool = True) -> None:
        if max_connections < 1:
            raise ValueError(f"need max_connections >= 1, got {max_connections}")
        self._max = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._in_flight = 0
        self._verify = verify
        self._ssl: ssl.SSLContext | bool | None = None
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, float | None], aiohttp.ClientTimeout] = {}

    @property
    def in_flight(self) -> int:
        """Requests sent whose response body is not closed yet."""
        return self._in_flight

    def _tls(self) -> ssl.SSLContext | bool:
        """For https only, made on first use: loading httpx's CA bundle (certifi) takes ~30 ms,
        which would delay the first requests of a plain-http replay."""
        if self._ssl is None:
            verify = self._verify
            self._ssl = verify if isinstance(verify, ssl.SSLContext) else bool(verify)
            if self._ssl is True:
                self._ssl = httpx.create_ssl_context()
        return self._ssl

    def _open_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self._max, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # httpx's client keeps the cookies, if any
            auto_decompress=False,  # httpx decodes Content-Encoding itself
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None, connect=None),
        )

    def client_timeout(self, connect: float | None, read: float | None) -> aiohttp.ClientTimeout:
        """httpx's connect and read timeouts as aiohttp's (one object per pair, reused)."""
        timeout = self._timeouts.get((connect, read))
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect, sock_read=read)
            self._timeouts[(connect, read)] = timeout
        return timeout

    async def acquire(self, pool_timeout: float | None) -> None:
        """Take a place among the ``max_connections``, waiting at most ``pool_timeout`` seconds."""
        if self._slots.locked():
            try:
                async with asyncio.timeout(pool_timeout):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no free connection within the pool timeout") from None
        else:
            await self._slots.acquire()
        self._in_flight += 1

    def release(self) -> None:
        self._in_flight -= 1
        self._slots.release()

    async def send(
        self,
        method: str,
        url: str,
        data: bytes | httpx.AsyncByteStream,
        headers: Mapping[str, str] | list[tuple[str, str]],
        timeout: aiohttp.ClientTimeout,
        *,
        decompress: bool,
        exact_headers: bool = False,
    ) -> aiohttp.ClientResponse:
        """Send a request, its answer's head read; a connection the server closed before answering
        is replaced once (a body of bytes only: a stream cannot be sent twice). ``exact_headers``:
        add none of aiohttp's own (User-Agent, Accept, Accept-Encoding), as a pass-through must."""
        if self._session is None:
            self._session = self._open_session()
        tls = self._tls() if url.startswith("https:") else True  # True: nothing to verify on http
        for attempt in (1, 2):
            try:
                return await self._session.request(
                    method,
                    url,
                    data=data,
                    headers=headers,
                    allow_redirects=False,
                    timeout=timeout,
                    auto_decompress=decompress,
                    ssl=tls,
                    skip_auto_headers=_AUTO_HEADERS if exact_headers else None,
                )
            except aiohttp.ServerDisconnectedError as exc:
                if attempt == 2 or not isinstance(data, bytes):
                    raise httpx_error(exc) from exc
            except _CAUGHT as exc:
                raise httpx_error(exc) from exc
        raise AssertionError("unreachable")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"{request.url.scheme!r} is not http or https")
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        # str pairs for aiohttp, decoded once here (httpx's own str views decode per header)
        raw = request.headers.raw
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
        data: bytes | httpx.AsyncByteStream
        if any(k.lower() == b"transfer-encoding" for k, _ in raw):  # a body of unknown length
            assert isinstance(request.stream, httpx.AsyncByteStream)
            data = request.stream
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]  # aiohttp's own
        else:
            data = await request.aread()
        timeout = self.client_timeout(timeouts.get("connect"), timeouts.get("read"))
        await self.acquire(timeouts.get("pool"))
        try:
            url = str(request.url)  # aiohttp parses it again (yarl keeps parsed URLs: ~0.3 us)
            response = await self.send(request.method, url, data, headers, timeout, decompress=False)
        except BaseException:
            self.release()
            raise
        version = response.version
        extensions = {
            "http_version": b"HTTP/%d.%d" % (version.major, version.minor) if version else b"HTTP/1.1",
            "reason_phrase": (response.reason or "").encode(),
        }
        return httpx.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, self.release),
            extensions=extensions,
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class ReplayClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` on an :class:`AiohttpTransport`, with a shorter way for the
    replayer's own streamed POSTs: :meth:`post_stream` goes to the transport directly. Everything
    else (``/metrics``, ``/v1/models``, warm-up...) goes through httpx as with any client."""

    def __init__(self, *, max_in_flight: int, timeout: httpx.Timeout) -> None:
        self.replay_transport = AiohttpTransport(max_in_flight)
        super().__init__(transport=self.replay_transport, timeout=timeout, trust_env=False)

    def post_stream(self, url: str, content: bytes, headers: Mapping[str, str]) -> _PostStream:
        """``async with client.post_stream(...) as answer``: as ``client.stream("POST", ...)`` but
        without httpx's client layer (request building, auth, redirects, cookies: ~150 us of CPU
        a request on 2 cores, half of what a replayed request costs; issue 14). The client's
        timeouts apply; event hooks, auth and cookies do not (the replayer uses none)."""
        return _PostStream(self.replay_transport, url, content, headers, self.timeout)


def replay_client(*, max_in_flight: int, timeout: httpx.Timeout) -> ReplayClient:
    """A client for :func:`autotune.bench.replay` with ``max_in_flight`` requests in flight, on
    :class:`AiohttpTransport`; no proxies from the environment."""
    return ReplayClient(max_in_flight=max_in_flight, timeout=timeout)
