"""Anonymize a workload: no text of the original survives, what tuning depends on does.

Every prompt and message content is replaced, token by token, by single-token words of the model's
own tokenizer. The replacement of a token is chosen by a keyed hash (the secret salt) of the whole
token prefix before it, including the roles and contents of the earlier messages of the request:
equal prefixes give equal replacements, and two texts that diverge at a token diverge at the same
token after anonymization (siblings of one prefix never share a replacement within a run). So each
request keeps its token count, and every pair of requests keeps its common token prefix: prefix
reuse and the working set are unchanged at any block size. Sessions (their ids hashed), turn order,
roles, timestamps, think times and ``max_tokens`` are kept.

The words are "safe" tokens: alphabetic tokens that encode to exactly themselves, bare and after a
space, so ``w0 w1 w2`` re-tokenizes to exactly three tokens. Tokenization at a message's edges can
differ from the original's (a content ending in a newline that merged with the chat template's);
:meth:`Anonymizer.verify` counts such requests, and ``anonymize_workload`` reports them.

The same salt gives the same output on another day, so documents shared by two days stay shared
(unless a hash collision among siblings was resolved differently: about one in the number of safe
words per divergence point).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.workload._model import ChatMessage, Workload, WorkloadRequest
from autotune.workload._tokens import ModelTokenizer

__all__ = ["AnonymizeResult", "Anonymizer", "anonymize_workload", "request_record"]

_MIN_SAFE_WORDS = 8


@dataclass(frozen=True)
class AnonymizeResult:
    records: list[dict[str, Any]]
    requests: int
    prompt_tokens_in: int
    prompt_tokens_out: int
    mismatched: tuple[str, ...]  # "<id>: N tokens -> M" for requests whose count changed
    safe_words: int


def _safe_words(tokenizer: ModelTokenizer) -> tuple[list[str], list[str]]:
    """(first, later): words that are one token bare and after a space; words one token after a space."""
    hf: Any = tokenizer._tok  # the wrapped Hugging Face tokenizer (same package)
    vocab: dict[str, int] = hf.get_vocab()
    first: list[str] = []
    later: list[str] = []
    for text in sorted({str(hf.convert_tokens_to_string([t])).strip() for t in vocab}):
        if not (text.isascii() and text.isalpha() and len(text) >= 2):
            continue
        if len(tokenizer.encode(" " + text)) != 1 or len(tokenizer.encode(f"{text} {text}")) != 2:
            continue
        later.append(text)
        if len(tokenizer.encode(text)) == 1:
            first.append(text)
    return first, later


class Anonymizer:
    """Replace text token by token under a keyed hash chain (see the module docstring).

    One instance keeps the sibling table of the run, so a workload (or a capture process) must use
    one instance for all its requests. Not thread-safe.
    """

    def __init__(self, tokenizer: ModelTokenizer, salt: bytes) -> None:
        if not salt:
            raise WorkloadError("anonymize: the salt is empty (set the salt variable to a secret string)")
        self._tok = tokenizer
        self._salt = hashlib.blake2b(salt, digest_size=32).digest()
        self._first, self._later = _safe_words(tokenizer)
        if len(self._first) < _MIN_SAFE_WORDS or len(self._later) < _MIN_SAFE_WORDS:
            raise WorkloadError(
                f"anonymize: {tokenizer.name} has only {len(self._first)} safe single-token words "
                f"(need {_MIN_SAFE_WORDS}; use the served model's own tokenizer)"
            )
        self._children: dict[bytes, dict[int, int]] = {}  # prefix -> original token -> word index
        self._used: dict[bytes, set[int]] = {}

    @property
    def safe_words(self) -> int:
        return len(self._later)

    @property
    def nodes(self) -> int:
        """Prefixes in the sibling table (memory grows with the distinct prefixes seen)."""
        return len(self._children)

    def forget(self) -> None:
        """Empty the sibling table (a long capture bounds its memory); the hash chain is unchanged."""
        self._children.clear()
        self._used.clear()

    def _hash(self, *parts: bytes) -> bytes:
        h = hashlib.blake2b(key=self._salt, digest_size=16)
        for part in parts:
            h.update(part)
        return h.digest()

    def pseudonym(self, kind: str, value: str | None) -> str | None:
        """A salted stand-in for an id: equal ids stay equal, nothing of the id is left."""
        if value is None:
            return None
        return f"{kind}-{self._hash(b'id', kind.encode(), value.encode()).hex()[:16]}"

    def _word(self, prefix: bytes, token: int, first: bool) -> int:
        children = self._children.setdefault(prefix, {})
        index = children.get(token)
        if index is not None:
            return index
        words = len(self._first if first else self._later)
        used = self._used.setdefault(prefix, set())
        digest = self._hash(prefix, b"pick", token.to_bytes(8, "little", signed=True))
        start = int.from_bytes(digest[:8], "little") % words
        index = start
        for step in range(words):  # siblings of one prefix get distinct words while any are left
            index = (start + step) % words
            if index not in used:
                break
        used.add(index)
        children[token] = index
        return index

    def _text(self, prefix: bytes, text: str, length: int | None = None) -> tuple[bytes, str]:
        """Anonymize ``text`` after ``prefix`` into ``length`` words (default: its own token count).

        Returns the chain after it and the new text. Tokens past the text's own (when its count in
        the chat template's context is larger) continue the chain with a padding marker.
        """
        tokens = self._tok.encode(text)
        count = len(tokens) if length is None else length
        out: list[str] = []
        for position in range(count):
            token = tokens[position] if position < len(tokens) else -1 - position
            first = position == 0
            index = self._word(prefix, token, first)
            out.append((self._first if first else self._later)[index])
            prefix = self._hash(prefix, token.to_bytes(8, "little", signed=True))
        return self._hash(prefix, b"\x00end"), " ".join(out)

    def _glue(self, messages: tuple[ChatMessage, ...]) -> list[tuple[str, str]] | None:
        """The chat template's text before and after each content, or None (no usable template)."""
        hf: Any = self._tok._tok  # the wrapped Hugging Face tokenizer (same package)
        if not self._tok.has_chat_template:
            return None
        marks = [f"\x00{i}\x00" for i in range(len(messages))]
        marked = [{"role": m.role, "content": mark} for m, mark in zip(messages, marks, strict=True)]
        try:
            rendered = str(hf.apply_chat_template(marked, tokenize=False, add_generation_prompt=True))
        except Exception:  # a template that refuses the markers: count contents alone
            return None
        if any(rendered.count(mark) != 1 for mark in marks):
            return None
        cuts = [0]
        for mark in marks:
            at = rendered.index(mark)
            cuts += [at, at + len(mark)]
        cuts.append(len(rendered))
        pieces = [rendered[cuts[k] : cuts[k + 1]] for k in range(0, len(cuts), 2)]
        return [(pieces[i], pieces[i + 1]) for i in range(len(messages))]

    def _in_context(self, glue: tuple[str, str] | None, content: str) -> int:
        """Tokens that ``content`` adds to the prompt between its template text (merges included)."""
        encode = self._tok.encode
        if glue is None:
            return len(encode(content))
        before, after = glue
        return len(encode(before + content + after)) - len(encode(before)) - len(encode(after))

    def _message(self, prefix: bytes, content: str, glue: tuple[str, str] | None) -> tuple[bytes, str]:
        """Anonymize one message so that it adds as many prompt tokens as the original (checked)."""
        target = self._in_context(glue, content)
        length = len(self._tok.encode(content))
        chain, text = self._text(prefix, content, length)
        for _ in range(3):  # the first word may merge with a space of the template, or not
            got = self._in_context(glue, text)
            if got == target or length + target - got < 0:
                break
            length += target - got
            chain, text = self._text(prefix, content, length)
        return chain, text

    def request(self, req: WorkloadRequest) -> WorkloadRequest:
        """The anonymized request (same index, line, sizes, timing; ids replaced)."""
        prompt = messages = None
        if req.prompt is not None:
            _, prompt = self._text(self._hash(b"prompt"), req.prompt)
        else:
            assert req.messages is not None
            chain = self._hash(b"chat")
            new: list[ChatMessage] = []
            glues = self._glue(req.messages)
            for i, m in enumerate(req.messages):
                prefix = self._hash(chain, b"role", m.role.encode())
                chain, content = self._message(prefix, m.content, glues[i] if glues else None)
                new.append(ChatMessage(m.role, content))
            messages = tuple(new)
        return WorkloadRequest(
            index=req.index,
            line=req.line,
            id=self.pseudonym("r", req.id) or "",
            max_tokens=req.max_tokens,
            prompt=prompt,
            messages=messages,
            timestamp=req.timestamp,
            session_id=self.pseudonym("s", req.session_id),
            think_time=req.think_time,
        )

    def verify(self, original: WorkloadRequest, anonymized: WorkloadRequest) -> tuple[int, int]:
        """(tokens before, tokens after) of the prompt as the server sees it (chat template applied)."""
        return len(self._tok.prompt_ids(original)), len(self._tok.prompt_ids(anonymized))


def request_record(req: WorkloadRequest) -> dict[str, Any]:
    """One workload-format JSON record of ``req`` (keys left out where they hold no information)."""
    record: dict[str, Any] = {"id": req.id}
    if req.session_id is not None:
        record["session_id"] = req.session_id
    if req.timestamp is not None:
        record["timestamp"] = req.timestamp
    if req.prompt is not None:
        record["prompt"] = req.prompt
    else:
        record["messages"] = req.message_dicts()
    record["max_tokens"] = req.max_tokens
    if req.think_time:
        record["think_time"] = req.think_time
    return record


def anonymize_workload(
    workload: Workload | Iterable[WorkloadRequest], tokenizer: ModelTokenizer, salt: bytes
) -> AnonymizeResult:
    """Anonymize every request and check each one's token count against the original."""
    anonymizer = Anonymizer(tokenizer, salt)
    requests = workload.requests if isinstance(workload, Workload) else tuple(workload)
    records: list[dict[str, Any]] = []
    mismatched: list[str] = []
    total_in = total_out = 0
    for req in requests:
        new = anonymizer.request(req)
        before, after = anonymizer.verify(req, new)
        total_in += before
        total_out += after
        if before != after:
            mismatched.append(f"request {req.index + 1} (line {req.line}): {before} tokens -> {after}")
        records.append(request_record(new))
    return AnonymizeResult(
        records=records,
        requests=len(requests),
        prompt_tokens_in=total_in,
        prompt_tokens_out=total_out,
        mismatched=tuple(mismatched),
        safe_words=anonymizer.safe_words,
    )
