"""The workload data model: what one request of the user's traffic is.

A workload file is JSONL, one request per line::

    {"prompt": "...", "max_tokens": 128}                          # completions API
    {"messages": [{"role": "user", "content": "..."}], "max_tokens": 64, "timestamp": 0.5}
    {"session_id": "s1", "messages": [...], "output_tokens": 64, "think_time": 2.0}

``output_tokens`` is accepted as an alias of ``max_tokens`` (``vllm bench serve``'s custom
format). Turns of a session are the lines with the same ``session_id``, in file order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["ChatMessage", "Workload", "WorkloadRequest"]


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class WorkloadRequest:
    """One request. Exactly one of ``prompt`` and ``messages`` is set."""

    index: int  # 0-based position among the loaded requests
    line: int  # 1-based line number in the source file
    id: str
    max_tokens: int
    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    timestamp: float | None = None  # seconds from the start of the run
    session_id: str | None = None
    think_time: float = 0.0  # seconds to wait after the previous turn of the session completed

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def message_dicts(self) -> list[dict[str, str]] | None:
        """The chat messages as the API takes them (fresh dicts), or None for a plain prompt."""
        return None if self.messages is None else [m.as_dict() for m in self.messages]

    def text(self) -> str:
        """The prompt text as sent (chat messages joined), for token counting and prefix analysis."""
        if self.prompt is not None:
            return self.prompt
        assert self.messages is not None
        return "\n".join(f"{m.role}: {m.content}" for m in self.messages)


@dataclass(frozen=True)
class Workload:
    path: Path
    requests: tuple[WorkloadRequest, ...]
    skipped: tuple[str, ...] = field(default=())  # one message per skipped line (--skip-bad-lines)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def has_timestamps(self) -> bool:
        return bool(self.requests) and all(r.timestamp is not None for r in self.requests)

    def sessions(self) -> Mapping[str, tuple[WorkloadRequest, ...]]:
        """Turns grouped by session, in file order. A request without a session is its own session."""
        groups: dict[str, list[WorkloadRequest]] = {}
        for r in self.requests:
            key = r.session_id if r.session_id is not None else f"\x00req-{r.index}"
            groups.setdefault(key, []).append(r)
        return {k: tuple(v) for k, v in groups.items()}

    def repeated(self, times: int) -> Workload:
        """The workload followed by ``times - 1`` copies of itself: copy k's sessions and ids end in
        ``~k`` (its turns stay one conversation, apart from the original's) and its timestamps are
        shifted by k periods, a period being the timestamps' span plus their mean gap, so the copies
        keep the file's pace."""
        if times <= 1 or not self.requests:
            return self
        stamps = [r.timestamp for r in self.requests if r.timestamp is not None]
        period = 0.0
        if stamps:
            span = max(stamps) - min(stamps)
            firsts = sorted({s[0].timestamp for s in self.sessions().values() if s[0].timestamp is not None})
            gap = span / (len(firsts) - 1) if len(firsts) > 1 else span
            period = span + gap
        n = len(self.requests)
        out = list(self.requests)
        for k in range(1, times):
            for r in self.requests:
                out.append(
                    replace(
                        r,
                        index=k * n + r.index,
                        id=f"{r.id}~{k}",
                        session_id=None if r.session_id is None else f"{r.session_id}~{k}",
                        timestamp=None if r.timestamp is None else r.timestamp + k * period,
                    )
                )
        return replace(self, requests=tuple(out))
