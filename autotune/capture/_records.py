"""From a request the proxy forwarded to one workload-format record in an hourly traffic file.

Runs in the recorder's writer process, never on the request path. A record keeps what tuning needs
(prompt or messages, ``max_tokens``, the arrival time, a hashed session id); headers, API keys and
every other body field are left out. Timestamps are seconds from the start of the UTC hour of the file
(``traffic-YYYYMMDDTHH.jsonl``), the layout :func:`autotune.workload.load_traffic` reads.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["CapturedRequest", "hour_file_name", "hour_start", "to_record"]

DEFAULT_MAX_TOKENS = 128  # when the client sent no max_tokens (the server's default is model-dependent)
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


@dataclass(frozen=True)
class CapturedRequest:
    """What the proxy hands over: no parsing on the request path."""

    arrival: float  # epoch seconds when the proxy received the request
    path: str  # "/v1/chat/completions" or "/v1/completions"
    body: bytes
    session: str | None = None  # the client's X-Session-Id header, when it sent one


class BadRecord(ValueError):
    """A request body that does not make a workload record (counted, never raised to a client)."""


def hour_start(epoch: float) -> float:
    return float(int(epoch // 3600) * 3600)


def hour_file_name(epoch: float) -> str:
    return time.strftime("traffic-%Y%m%dT%H.jsonl", time.gmtime(epoch))


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):  # content parts: keep the text ones
        return "".join(
            str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("type") == "text"
        )
    raise BadRecord(f"message content of type {type(value).__name__}")


def _max_tokens(body: dict[str, Any]) -> int:
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return DEFAULT_MAX_TOKENS


def to_record(req: CapturedRequest) -> dict[str, Any]:
    """The workload-format record of ``req`` (raw text); raises :class:`BadRecord`."""
    try:
        body = json.loads(req.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRecord(f"body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRecord("body is not a JSON object")
    record: dict[str, Any] = {"timestamp": round(req.arrival - hour_start(req.arrival), 6)}
    if req.path.endswith("/chat/completions"):
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRecord("chat request without messages")
        out = []
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in _ROLES:
                raise BadRecord(f"message role {m.get('role') if isinstance(m, dict) else m!r}")
            out.append({"role": _ROLES[m["role"]], "content": _content(m.get("content"))})
        record["messages"] = out
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise BadRecord("completions request without one text prompt")
        record["prompt"] = prompt
    record["max_tokens"] = _max_tokens(body)
    session = _session_id(req.session, body, record.get("messages"))
    if session is not None:
        record["session_id"] = session
    return record


def _digest(kind: str, value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _session_id(
    header: str | None, body: dict[str, Any], messages: list[dict[str, str]] | None
) -> str | None:
    """The turns of one conversation share it (multi-turn prefix reuse): the client's X-Session-Id,
    else its ``user`` field, else (chat) the conversation's opening (system messages and the first
    user message), which every later turn repeats. Hashed: an id is kept, never the client's value."""
    if header:
        return _digest("header", header)
    user = body.get("user")
    if isinstance(user, str) and user:
        return _digest("user", user)
    if messages:
        first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), len(messages) - 1)
        return _digest("prefix", messages[: first_user + 1])
    return None
