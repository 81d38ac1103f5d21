"""Convert other formats into workload records: ShareGPT, ``vllm bench serve`` custom JSONL, OpenAI logs.

Each importer returns an :class:`ImportResult`: the converted records (workload-file dicts), the
skipped entries with a one-line reason each, and notes about the conversion as a whole. An entry
that is malformed raises :class:`WorkloadError` unless ``skip_bad_lines`` is set; an entry that is
well-formed but cannot be replayed (e.g. an OpenAI request without ``max_tokens``) is always skipped
with its reason. Nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from autotune.errors import WorkloadError
from autotune.workload._tokens import PromptTokenizer, count_tokens

__all__ = ["ImportResult", "import_bench_jsonl", "import_openai_log", "import_sharegpt"]

Record = dict[str, Any]

_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
}
_OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True)
class ImportResult:
    source: Path
    records: tuple[Record, ...]
    skipped: tuple[str, ...] = ()  # "<file>:<line or entry>: <reason>", one per skipped entry
    notes: tuple[str, ...] = ()  # remarks about the whole conversion

    @property
    def converted(self) -> int:
        return len(self.records)


class _Skip(Exception):
    """A well-formed entry that cannot be replayed: always skipped, with this reason."""


class _Bad(Exception):
    """A malformed entry: an error, or a skip with ``skip_bad_lines``."""


class _Collector:
    def __init__(self, source: Path, skip_bad_lines: bool) -> None:
        self.source = source
        self.skip_bad_lines = skip_bad_lines
        self.records: list[Record] = []
        self.skipped: list[str] = []
        self.notes: list[str] = []

    def fail(self, where: str, exc: _Skip | _Bad) -> None:
        message = f"{self.source}:{where}: {exc}"
        if isinstance(exc, _Bad) and not self.skip_bad_lines:
            raise WorkloadError(f"{message} (fix the entry, or pass --skip-bad-lines)")
        self.skipped.append(message)

    def result(self) -> ImportResult:
        if not self.records:
            detail = f"; first skip: {self.skipped[0]}" if self.skipped else ""
            raise WorkloadError(
                f"{self.source}: nothing to import ({len(self.skipped)} entries skipped{detail})"
            )
        return ImportResult(self.source, tuple(self.records), tuple(self.skipped), tuple(self.notes))


def _read_text(path: Path) -> str:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: file not found (check the path)") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror} (check the path and permissions)") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise WorkloadError(
            f"{path}:{line}: not UTF-8 text at column {exc.start - start + 1} (byte "
            f"{data[exc.start : exc.end].hex(' ')}) (save the file as UTF-8, e.g. iconv -f latin1 -t utf-8)"
        ) from None


def _json_lines(text: str) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed object)`` per non-blank line; an invalid line yields a :class:`_Bad`."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            yield lineno, _Bad(f"invalid JSON: {exc.msg} at column {exc.colno}")


# ---- ShareGPT --------------------------------------------------------------------------------


def import_sharegpt(
    path: Path,
    *,
    tokenizer: PromptTokenizer | None = None,
    default_max_tokens: int = 128,
    skip_bad_lines: bool = False,
) -> ImportResult:
    """ShareGPT JSON (a list, or JSONL) of ``{"id", "conversations": [{"from", "value"}]}``.

    Each conversation becomes a session; each human turn a request whose messages hold the
    recorded history. ``max_tokens`` is the length of the recorded reply (tokens of ``tokenizer``,
    else words), ``default_max_tokens`` when the turn has no reply.
    """
    path = Path(path)
    text = _read_text(path)
    out = _Collector(path, skip_bad_lines)
    entries: list[tuple[str, Any]]
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"{path}:{exc.lineno}: invalid JSON: {exc.msg} "
                "(a ShareGPT file is a JSON list of conversations)"
            ) from None
        entries = [(f"entry {i}", item) for i, item in enumerate(data)]
    else:
        entries = [(str(lineno), item) for lineno, item in _json_lines(text)]
    seen: set[str] = set()
    for n, (where, item) in enumerate(entries):
        try:
            if isinstance(item, _Bad):
                raise item
            out.records.extend(_sharegpt_conversation(item, n, tokenizer, default_max_tokens, seen))
        except (_Skip, _Bad) as exc:
            out.fail(where, exc)
    return out.result()


def _sharegpt_conversation(
    item: Any, n: int, tokenizer: PromptTokenizer | None, default_max_tokens: int, seen: set[str]
) -> list[Record]:
    if not isinstance(item, dict) or not isinstance(item.get("conversations"), list):
        raise _Bad('expected an object with a "conversations" list')
    conv_id = str(item.get("id", f"conv{n}"))
    if conv_id in seen:  # ShareGPT dumps repeat ids; sessions must stay apart
        conv_id = f"{conv_id}~{n}"
    turns: list[dict[str, str]] = []
    for k, turn in enumerate(item["conversations"]):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise _Bad(f'conversations[{k}]: expected {{"from": ..., "value": "<text>"}}')
        role = _SHAREGPT_ROLES.get(str(turn.get("from")))
        if role is None:
            raise _Bad(
                f"conversations[{k}].from: unknown speaker {turn.get('from')!r} (human, gpt or system)"
            )
        turns.append({"role": role, "content": turn["value"]})
    records: list[Record] = []
    for k, turn in enumerate(turns):
        if turn["role"] != "user" or not any(m["content"].strip() for m in turns[: k + 1]):
            continue  # a conversation without text yet: vLLM would refuse it, or measure nothing
        reply = turns[k + 1] if k + 1 < len(turns) and turns[k + 1]["role"] == "assistant" else None
        max_tokens = (
            default_max_tokens if reply is None else max(1, count_tokens(reply["content"], tokenizer))
        )
        records.append(
            {
                "id": f"{conv_id}-t{len(records)}",
                "session_id": conv_id,
                "messages": [dict(m) for m in turns[: k + 1]],
                "max_tokens": max_tokens,
            }
        )
    if not records:
        raise _Skip("no human turn in the conversation")
    seen.add(conv_id)
    return records


# ---- vllm bench serve custom JSONL ------------------------------------------------------------


def import_bench_jsonl(
    path: Path, *, default_max_tokens: int | None = None, as_chat: bool = False, skip_bad_lines: bool = False
) -> ImportResult:
    """``vllm bench serve --dataset-name custom`` JSONL: ``{"prompt": ..., "output_tokens": N}``.

    ``vllm bench serve`` wraps each prompt in the chat template unless ``--skip-chat-template``;
    ``as_chat`` reproduces that by sending the prompt as one user message to the chat API.
    Lines without ``output_tokens`` take ``default_max_tokens`` (like ``--custom-output-len``).
    """
    path = Path(path)
    out = _Collector(path, skip_bad_lines)
    for lineno, item in _json_lines(_read_text(path)):
        try:
            if isinstance(item, _Bad):
                raise item
            if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
                raise _Bad('expected an object with a "prompt" string')
            if not item["prompt"].strip():
                raise _Bad(f"prompt: no text, got {item['prompt']!r} (vLLM refuses it with HTTP 400)")
            raw = item.get("output_tokens", default_max_tokens)
            if raw is None:
                raise _Bad("output_tokens: missing (add it, or pass a default output length)")
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise _Bad(f"output_tokens: must be an integer >= 1, got {raw!r}")
            record: Record = {"id": f"line-{lineno}"}
            if as_chat:
                record["messages"] = [{"role": "user", "content": item["prompt"]}]
            else:
                record["prompt"] = item["prompt"]
            record["max_tokens"] = raw
            out.records.append(record)
        except _Bad as exc:
            out.fail(str(lineno), exc)
    return out.result()


# ---- OpenAI request logs ----------------------------------------------------------------------


def import_openai_log(path: Path, *, skip_bad_lines: bool = False) -> ImportResult:
    """One OpenAI chat/completions or completions request body per line.

    A line is the body itself, a wrapper ``{"timestamp": ..., "body": {...}}`` (also the Batch
    API's ``{"custom_id", "url", "body"}``), or a body with a top-level ``timestamp`` or
    ``created``. Timestamps (epoch seconds or ISO 8601) become seconds from the first request.
    Kept: messages (text content), prompt, ``max_tokens`` / ``max_completion_tokens``; the
    model-specific fields (model, temperature, ...) are dropped.
    """
    path = Path(path)
    out = _Collector(path, skip_bad_lines)
    times: list[float | None] = []
    ids: set[str] = set()
    for lineno, item in _json_lines(_read_text(path)):
        try:
            if isinstance(item, _Bad):
                raise item
            record, when = _openai_entry(item)
        except (_Skip, _Bad) as exc:
            out.fail(str(lineno), exc)
            continue
        if record.get("id") in ids:  # a repeated custom_id: fall back to the line number
            del record["id"]
        record = {"id": f"line-{lineno}", **record}
        ids.add(record["id"])
        out.records.append(record)
        times.append(when)
    known = [t for t in times if t is not None]
    if known and len(known) == len(times):
        start = min(known)
        for record, t in zip(out.records, known, strict=True):
            record["timestamp"] = round(t - start, 3)
    elif known:
        out.notes.append(
            f"timestamps dropped: only {len(known)} of {len(times)} requests have one "
            "(a workload gives every request a timestamp, or none)"
        )
    return out.result()


def _openai_entry(item: Any) -> tuple[Record, float | None]:
    if not isinstance(item, dict):
        raise _Bad("expected a JSON object (a request body)")
    body = item.get("body", item)
    if not isinstance(body, dict):
        raise _Bad('"body" must be an object (the request body)')
    when = _timestamp(item.get("timestamp", item.get("created", body.get("created"))))
    record: Record = {}
    if isinstance(item.get("custom_id"), str):
        record["id"] = item["custom_id"]
    if "messages" in body:
        record["messages"] = _openai_messages(body["messages"])
        if not any(m["content"].strip() for m in record["messages"]):
            raise _Skip("messages: no message has text (not replayed: nothing to measure)")
    elif "prompt" in body:
        record["prompt"] = _openai_prompt(body["prompt"])
        if not record["prompt"].strip():
            raise _Skip("prompt: no text (vLLM refuses it with HTTP 400; not replayed)")
    else:
        raise _Bad("neither messages nor prompt in the request body")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is None:
        raise _Skip("no max_tokens or max_completion_tokens: the output length is unknown")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _Bad(f"max_tokens: must be an integer >= 1, got {max_tokens!r}")
    record["max_tokens"] = max_tokens
    return record, when


def _openai_messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise _Bad("messages: must be a non-empty list")
    converted = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _Bad(f"messages[{k}]: must be an object with role and content")
        role = _OPENAI_ROLES.get(str(m.get("role")))
        if role is None:
            raise _Skip(f"messages[{k}].role: {m.get('role')!r} is not a chat role this tool replays")
        converted.append({"role": role, "content": _openai_content(m.get("content"), k)})
    return converted


def _openai_content(content: Any, k: int) -> str:
    if content is None:
        return ""  # e.g. an assistant message that only carries tool calls
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _Skip(f"messages[{k}].content: {kind!r} part (only text is replayed)")
            texts.append(part["text"])
        return "".join(texts)
    raise _Bad(f"messages[{k}].content: must be a string or a list of parts, got {type(content).__name__}")


def _openai_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if isinstance(prompt, list):
        raise _Skip("prompt: a batch of prompts or token ids (import one prompt string per request)")
    raise _Bad(f"prompt: must be a string, got {type(prompt).__name__}")


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Bad(f"timestamp: expected epoch seconds or ISO 8601, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise _Bad(f"timestamp: expected epoch seconds or ISO 8601, got {value!r}")
