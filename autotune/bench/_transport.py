"""The replayer's HTTP transport: HTTP/1.1 with keep-alive on asyncio's own protocols.

httpx's default transport sends a request through httpcore, anyio and h11. On 2 cores against the
fake server that stack was ~90% of the replayer's CPU (py-spy, issue 14: anyio's cancel scopes,
h11's state machine, httpcore's pool bookkeeping; the socket calls themselves ~6%), 1.1-1.2 ms
per request, so the replayer sent at most ~600-950 requests/s and fell behind a schedule of
1,500/s. httpcore's pool also re-examines every connection each time a request starts or ends
(httpcore 1.0.9, ``AsyncConnectionPool._assign_requests_to_connections``): with 1024 connections
in one pool a request cost 10-14 ms (issue 17), which is why this module once held httpx pools of
4 side by side (benchmarks/replay_scale.py ``--client sharded`` keeps that for comparison). With
this transport a request costs ~0.3 ms and the replayer sends ~2,500 requests/s
(benchmarks/results/issue14-replay.md).

:class:`Http11Transport` does only what a replay needs, behind httpx's transport seam (the client,
its timeouts, its errors and the response objects stay httpx's): one write per request (head and
body together; the wire format is :mod:`autotune.bench._http11`), idle connections kept per
origin and reused last-in first-out, at most ``max_connections`` requests at once. TLS comes from
asyncio. Timeouts are httpx's (connect, read, pool); a read timer is armed only while a read
actually waits. Failures are httpx's exceptions (``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError``...). Not here: proxies, HTTP/2, a write timeout (a request goes into
asyncio's write buffer whole). Checked against uvicorn (h11 and httptools), the fake server
(http.server, chunked), a raw-asyncio stub (Content-Length) and TLS.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import Any

import httpx

from autotune.bench._http11 import (
    Connection,
    Origin,
    StaleConnection,
    parse_head,
    request_bytes,
    response_body,
)

__all__ = ["Http11Transport", "replay_client"]


class Http11Transport(httpx.AsyncBaseTransport):
    """At most ``max_connections`` requests at once (more wait, up to httpx's pool timeout), over
    kept-alive HTTP/1.1 connections per origin; ``verify`` as httpx's (for https)."""

    def __init__(self, max_connections: int, *, verify: ssl.SSLContext | bool = True) -> None:
        if max_connections < 1:
            raise ValueError(f"need max_connections >= 1, got {max_connections}")
        self._slots = asyncio.Semaphore(max_connections)
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[Origin, list[Connection]] = {}
        self._active: set[Connection] = set()

    @property
    def in_flight(self) -> int:
        """Requests sent whose response body is not closed yet."""
        return len(self._active)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            verify = self._verify
            self._ssl = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        return self._ssl

    async def _connect(self, origin: Origin, timeout: float | None) -> Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._ssl_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(loop, origin),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"could not connect to {host}:{port} within {timeout} s") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        return conn

    async def _connection(self, origin: Origin, timeout: float | None) -> Connection:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.idle_usable:
                conn.reused = True
                return conn
            conn.close()
        return await self._connect(origin, timeout)

    def _release(self, conn: Connection, reuse: bool) -> None:
        if conn not in self._active:
            return
        self._active.discard(conn)
        self._slots.release()
        if reuse and conn.idle_usable:
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()

    async def _exchange(
        self, origin: Origin, message: bytes, connect_timeout: float | None, read_timeout: float | None
    ) -> tuple[Connection, bytes]:
        """Send ``message`` and read the answer's head; the connection returned is active. A
        kept-alive connection the server closed before answering (its idle timeout: uvicorn's is
        5 s) is replaced by a new connection."""
        conn = await self._connection(origin, connect_timeout)
        while True:
            self._active.add(conn)
            try:
                assert conn.transport is not None
                conn.transport.write(message)
                return conn, await conn.read_head(read_timeout)
            except BaseException as exc:
                self._active.discard(conn)
                conn.close()
                if not isinstance(exc, StaleConnection):
                    raise
            conn = await self._connect(origin, connect_timeout)  # new connections are never stale

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"{url.scheme!r} is not http or https")
        origin: Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        if self._slots.locked():
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no free connection within the pool timeout") from None
        else:
            await self._slots.acquire()
        read_timeout = timeouts.get("read")
        try:
            message = await request_bytes(request)
            conn, head = await self._exchange(origin, message, timeouts.get("connect"), read_timeout)
            try:
                status, reason, version, headers = parse_head(head)
                while 100 <= status < 200:  # informational answers (100 Continue...) precede the answer
                    status, reason, version, headers = parse_head(await conn.read_head(read_timeout))
                body = response_body(
                    functools.partial(self._release, conn),
                    conn,
                    status,
                    version,
                    headers,
                    request.method,
                    read_timeout,
                )
            except BaseException:
                self._active.discard(conn)
                conn.close()
                raise
        except BaseException:
            self._slots.release()
            raise
        extensions = {"http_version": version, "reason_phrase": reason}
        return httpx.Response(status, headers=headers, stream=body, extensions=extensions)

    async def aclose(self) -> None:
        conns = [c for idle in self._idle.values() for c in idle] + list(self._active)
        self._idle.clear()
        self._active.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.sleep(0)  # let asyncio close the sockets before the loop may end


def replay_client(*, max_in_flight: int, timeout: httpx.Timeout) -> httpx.AsyncClient:
    """A client for :func:`autotune.bench.replay` with ``max_in_flight`` requests in flight, on
    :class:`Http11Transport`; no proxies from the environment."""
    return httpx.AsyncClient(transport=Http11Transport(max_in_flight), timeout=timeout, trust_env=False)
