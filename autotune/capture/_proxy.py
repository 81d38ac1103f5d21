"""An OpenAI-compatible pass-through in front of vLLM that hands each request to a recorder.

Every request (any method, any path: chat, completions, models, health, metrics) is forwarded to
the upstream as it came; the response is streamed back byte for byte (``aiter_raw``: no decoding,
no re-encoding) with its status and headers, less the hop-by-hop ones. POSTs to
``/v1/chat/completions`` and ``/v1/completions`` are submitted to the recorder once the upstream has
answered with a status below 400: a non-blocking queue put of the raw body, nothing parsed here.
Recording can fail in any way without the client seeing it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from autotune.capture._records import CapturedRequest

__all__ = ["RECORDED_PATHS", "Recorder", "capture_app"]

log = logging.getLogger(__name__)

RECORDED_PATHS = ("/v1/chat/completions", "/v1/completions")
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


class Recorder(Protocol):
    def submit(self, req: CapturedRequest) -> None: ...


def _headers(
    items: httpx.Headers | list[tuple[str, str]], keep_length: bool = False
) -> list[tuple[str, str]]:
    """Headers less the hop-by-hop ones (a raw response body keeps its Content-Length)."""
    pairs = items.multi_items() if isinstance(items, httpx.Headers) else items
    drop = _HOP_BY_HOP - {"content-length"} if keep_length else _HOP_BY_HOP
    return [(k, v) for k, v in pairs if k.lower() not in drop]


def capture_app(upstream: str, recorder: Recorder, *, client: httpx.AsyncClient | None = None) -> Starlette:
    """The proxy as an ASGI app. ``client`` (tests) replaces the one made for ``upstream``."""
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        own = client is None
        state["client"] = client or httpx.AsyncClient(base_url=upstream, timeout=None, limits=limits)
        try:
            yield
        finally:
            if own:
                await state["client"].aclose()

    async def forward(request: Request) -> Response:
        arrival = time.time()
        body = await request.body()
        http = state.get("client") or client
        assert http is not None, "the app's lifespan did not run"
        query = request.url.query
        url = request.url.path + (f"?{query}" if query else "")
        upstream_request = http.build_request(
            request.method, url, headers=_headers(list(request.headers.items())), content=body
        )
        try:
            response = await http.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            log.warning("capture: upstream %s unreachable: %s", upstream, exc)
            return Response(
                f'{{"error": "upstream unreachable: {type(exc).__name__}"}}',
                502,
                media_type="application/json",
            )
        if request.method == "POST" and request.url.path in RECORDED_PATHS and response.status_code < 400:
            try:
                recorder.submit(CapturedRequest(arrival=arrival, path=request.url.path, body=body))
            except Exception:  # never fail a request because recording failed
                log.exception("capture: recorder refused a request")
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=dict(_headers(response.headers, keep_length=True)),
            background=BackgroundTask(response.aclose),
        )

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)
