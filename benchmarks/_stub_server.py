"""A trivial OpenAI-compatible stub for measuring the replayer itself (benchmarks/fidelity.py, part b).

Raw asyncio (uvloop when installed), HTTP/1.1 keep-alive, no framework: every POST is answered at
once with a one-token SSE stream (one chunk, the usage chunk, ``[DONE]``); ``GET /health`` and
``/v1/models`` answer too. It measures nothing; it only has to be much faster than the client.

    python benchmarks/_stub_server.py --port 8123
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json

_SSE = (
    b'data: {"choices":[{"index":0,"text":"x"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)
_STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: "
    + str(len(_SSE)).encode()
    + b"\r\n\r\n"
    + _SSE
)


def _json(code: int, obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return (
        f"HTTP/1.1 {code} {'OK' if code == 200 else 'Not Found'}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


_MODELS = _json(200, {"data": [{"id": "stub"}]})
_HEALTH = _json(200, {})
_NOT_FOUND = _json(404, {"error": "not found"})


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, _, headers = head.partition(b"\r\n")
            method, path, _ = request_line.split(b" ", 2)
            length = 0
            for line in headers.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            if method == b"POST":
                writer.write(_STREAM)
            elif path == b"/health":
                writer.write(_HEALTH)
            elif path == b"/v1/models":
                writer.write(_MODELS)
            else:
                writer.write(_NOT_FOUND)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _main(host: str, port: int) -> None:
    server = await asyncio.start_server(_serve, host, port, backlog=4096)
    print(f"stub listening on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    run = asyncio.run
    with contextlib.suppress(ImportError):
        import uvloop

        run = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        run(_main(args.host, args.port))


if __name__ == "__main__":
    main()
