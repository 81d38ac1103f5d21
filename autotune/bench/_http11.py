"""HTTP/1.1 on the wire, for :class:`autotune.bench.Http11Transport`: a connection as an asyncio
protocol whose bytes collect in a buffer, the request written in one piece, the response head
parsed from bytes and its body framed by ``Content-Length``, chunked encoding or the end of the
connection (RFC 9112). Errors are httpx's exceptions, as httpx's own transports raise them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx

__all__ = [
    "Connection",
    "Origin",
    "ResponseBody",
    "StaleConnection",
    "parse_head",
    "request_bytes",
    "response_body",
]

_MAX_HEAD = 64 * 1024  # bytes of a response head (status line and headers)
_PAUSE_AT = 1 << 20  # stop reading the socket while this much is buffered and unread
_NO_BODY_STATUS = frozenset({204, 304})
Origin = tuple[str, str, int]  # scheme, host, port


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("no data from the server within the read timeout"))


class StaleConnection(Exception):
    """A kept-alive connection the server had closed before it answered (its idle timeout ran out as
    the request went): the request may be sent again on a new connection."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: bytes arrive into a buffer; a reader waits for more with a timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.reused = False  # kept alive from an earlier request
        self.lost: Exception | None = None  # why the connection ended, when it ended in an error
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > _PAUSE_AT and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        self._wake()
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.lost = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- reading (one reader at a time)
    @property
    def idle_usable(self) -> bool:
        """Open, nothing unread: safe to send the next request on."""
        return (
            not self.eof and not self.buf and self.transport is not None and not self.transport.is_closing()
        )

    async def _more(self, timeout: float | None) -> None:
        """Wait until more bytes (or the end) arrive; the end of the connection raises."""
        if self.eof:
            if self.lost is not None:
                raise httpx.ReadError(f"{type(self.lost).__name__}: {self.lost}")
            raise httpx.RemoteProtocolError("the server closed the connection before the answer was complete")
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._waiter = waiter = self.loop.create_future()
        timer = self.loop.call_later(timeout, _expire, waiter) if timeout is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def read_until(self, sep: bytes, timeout: float | None, limit: int = _MAX_HEAD) -> bytes:
        start = 0
        while (i := self.buf.find(sep, start)) < 0:
            if len(self.buf) > limit:
                raise httpx.RemoteProtocolError(f"a response line or head longer than {limit} bytes")
            start = max(0, len(self.buf) - len(sep) + 1)
            await self._more(timeout)
        out = bytes(self.buf[:i])
        del self.buf[: i + len(sep)]
        return out

    async def read_exactly(self, n: int, timeout: float | None) -> bytes:
        while len(self.buf) < n:
            await self._more(timeout)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_some(self, at_most: int | None, timeout: float | None) -> bytes:
        """What is buffered (at least one byte, at most ``at_most``); b"" at the end of the connection."""
        while not self.buf:
            if self.eof:
                return b""
            await self._more(timeout)
        n = len(self.buf) if at_most is None else min(at_most, len(self.buf))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_head(self, timeout: float | None) -> bytes:
        """A response head; on a reused connection that ends before its first byte, StaleConnection."""
        if self.reused and not self.buf:
            if not self.eof:
                await self._more(timeout)
            if not self.buf:
                raise StaleConnection
        return await self.read_until(b"\r\n\r\n", timeout)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.eof = True


class ResponseBody(httpx.AsyncByteStream):
    """A response body read from its connection. Closing it calls ``on_close(reusable)``: reusable
    when the body was read to its end and both sides keep the connection alive."""

    def __init__(
        self,
        on_close: Callable[[bool], None],
        conn: Connection,
        *,
        chunked: bool,
        length: int | None,
        keep_alive: bool,
        timeout: float | None,
    ) -> None:
        self._on_close = on_close
        self._conn = conn
        self._chunked = chunked
        self._length = length
        self._keep_alive = keep_alive
        self._timeout = timeout
        self._complete = length == 0 and not chunked
        self._open = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn, timeout = self._conn, self._timeout
        if self._complete:
            return
        if self._chunked:
            while True:
                size_line = await conn.read_until(b"\r\n", timeout)
                try:
                    size = int(size_line.split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size line {size_line[:40]!r}") from None
                if size == 0:
                    while await conn.read_until(b"\r\n", timeout):  # trailers, up to an empty line
                        pass
                    break
                data = await conn.read_exactly(size + 2, timeout)
                if not data.endswith(b"\r\n"):
                    raise httpx.RemoteProtocolError("a chunk not followed by CRLF")
                yield data[:-2]
        elif self._length is not None:
            left = self._length
            while left:
                data = await conn.read_some(left, timeout)
                if not data:
                    raise httpx.RemoteProtocolError(f"the server closed the connection {left} bytes short")
                left -= len(data)
                yield data
        else:  # no length, not chunked: the body ends with the connection
            while data := await conn.read_some(None, timeout):
                yield data
        self._complete = True

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._on_close(self._complete and self._keep_alive)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    value = None
    for k, v in headers:
        if k.lower() == name:
            value = v
    return value


async def request_bytes(request: httpx.Request) -> bytes:
    """The request as sent: request line, headers and body in one piece."""
    body = await request.aread()
    headers = request.headers.raw
    if _header(headers, b"transfer-encoding") is not None:  # a body of unknown length
        body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"
    head = b"".join(k + b": " + v + b"\r\n" for k, v in headers)
    return b"%s %s HTTP/1.1\r\n%s\r\n%s" % (request.method.encode(), request.url.raw_path, head, body)


Head = tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]


def parse_head(head: bytes) -> Head:
    """Status, reason phrase, version and headers of a response head."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    try:
        version, status = status_line[0], int(status_line[1])
    except (IndexError, ValueError):
        raise httpx.RemoteProtocolError(f"bad status line {lines[0][:80]!r}") from None
    if not version.startswith(b"HTTP/1."):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise httpx.RemoteProtocolError(f"bad header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return status, status_line[2] if len(status_line) > 2 else b"", version, headers


def response_body(
    on_close: Callable[[bool], None],
    conn: Connection,
    status: int,
    version: bytes,
    headers: list[tuple[bytes, bytes]],
    method: str,
    timeout: float | None,
) -> ResponseBody:
    """How the body is framed (RFC 9112 section 6.3), and whether the connection stays open after it."""
    keep_alive = version == b"HTTP/1.1" and b"close" not in (_header(headers, b"connection") or b"").lower()
    length: int | None = None
    chunked = False
    if method == "HEAD" or status in _NO_BODY_STATUS:
        length = 0
    elif b"chunked" in (_header(headers, b"transfer-encoding") or b"").lower():
        chunked = True
    elif (declared := _header(headers, b"content-length")) is not None:
        try:
            length = int(declared)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad Content-Length {declared[:40]!r}") from None
    else:
        keep_alive = False  # the body ends when the server closes the connection
    return ResponseBody(
        on_close, conn, chunked=chunked, length=length, keep_alive=keep_alive, timeout=timeout
    )
