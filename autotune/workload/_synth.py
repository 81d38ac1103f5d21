"""Synthetic workloads: RAG over shared documents, multi-turn support chat, one repeated prefix.

Each generator is a pure function returning request dicts in the workload file format (see
:mod:`autotune.workload._model`), deterministic for a given seed and tokenizer. Text is made of
random pseudo-words drawn from a seeded vocabulary, so different documents do not share a prefix
by accident. Lengths are in tokens of ``tokenizer`` when one is given (within 2 tokens), else in
words (1 token is taken as 1 word).

Timestamps come from a Poisson process at ``rate`` (requests or sessions per second; the process of
:func:`autotune.workload.arrival_offsets`, which the replayer's ``--rate`` also uses); ``rate=None``
leaves them out (the replayer then sends as fast as its concurrency allows). A later turn of a chat
session carries ``think_time`` and a timestamp that is a lower bound (session start plus the think
times before it): the replayer sends it ``think_time`` seconds after the previous turn completed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from autotune.errors import WorkloadError
from autotune.workload._arrivals import arrival_offsets
from autotune.workload._tokens import PromptTokenizer

__all__ = ["LengthSpec", "TextGenerator", "synth_chat", "synth_prefix_repeat", "synth_rag"]

Record = dict[str, Any]

_CLUSTERS = ("br", "ch", "cl", "dr", "fl", "gr", "kr", "pl", "pr", "sh", "sk", "st", "th", "tr")
_ONSETS: tuple[str, ...] = (*"bcdfghjklmnprstvwz", *_CLUSTERS)
_VOWELS: tuple[str, ...] = (*"aeiou", "ai", "ea", "ee", "oa", "ou")
_CODAS = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck")
_SPEC_RE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class LengthSpec:
    """A token count: fixed (``low == high``) or uniform over ``[low, high]``."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise WorkloadError(f"length {self.low}-{self.high}: must be 1 <= low <= high (e.g. 24 or 16-32)")

    @classmethod
    def parse(cls, text: str) -> LengthSpec:
        """``"24"`` (fixed) or ``"16-32"`` (uniform, inclusive)."""
        match = _SPEC_RE.match(text)
        if match is None:
            raise WorkloadError(f"length {text!r}: not a number or a range (write e.g. 24 or 16-32)")
        low = int(match.group(1))
        return cls(low, int(match.group(2)) if match.group(2) else low)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


class TextGenerator:
    """Random pseudo-word text of a given token length."""

    def __init__(
        self, seed: int, tokenizer: PromptTokenizer | None = None, *, stream: str = "", vocabulary: int = 5000
    ) -> None:
        # ``stream`` keeps generators apart: the RAG and chat texts of one seed share nothing
        self._rng = random.Random(f"text-{stream}-{seed}")
        self._tokenizer = tokenizer
        words: set[str] = set()
        while len(words) < vocabulary:
            syllables = self._rng.choice((1, 2, 2, 3))
            words.add("".join(self._syllable() for _ in range(syllables)))
        self._vocab = sorted(words)

    def _syllable(self) -> str:
        return self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) + self._rng.choice(_CODAS)

    def words(self, n: int) -> list[str]:
        return [self._rng.choice(self._vocab) for _ in range(n)]

    def text(self, n_tokens: int) -> str:
        """Text of ``n_tokens`` tokens (words without a tokenizer; within 2 tokens with one)."""
        if n_tokens <= 0:
            return ""
        tok = self._tokenizer
        if tok is None:
            return " ".join(self.words(n_tokens))

        def count(words: list[str]) -> int:
            return len(tok.encode(" ".join(words)))

        words = self.words(n_tokens)
        while count(words) < n_tokens:
            words += self.words(max(4, (n_tokens - count(words)) // 2))
        # smallest k with count(words[:k]) >= n_tokens
        lo, hi = 1, len(words)
        while lo < hi:
            mid = (lo + hi) // 2
            if count(words[:mid]) >= n_tokens:
                hi = mid
            else:
                lo = mid + 1
        over, under = count(words[:lo]) - n_tokens, n_tokens - count(words[: lo - 1])
        if min(over, under) <= 2:
            return " ".join(words[:lo] if over <= under else words[: lo - 1])
        # the last word alone is more than 2 tokens off: grow it letter by letter instead
        base, last = words[: lo - 1], words[lo - 1]
        best, best_diff = " ".join(base), under
        for end in range(1, len(last) + 1):
            candidate = " ".join([*base, last[:end]])
            diff = len(tok.encode(candidate)) - n_tokens
            if abs(diff) < best_diff:
                best, best_diff = candidate, abs(diff)
            if diff > 2:
                break
        return best


def _arrivals(n: int, rate: float | None, seed: int) -> list[float] | None:
    """Poisson arrival times (first at 0), in seconds rounded to milliseconds; None without a rate."""
    if rate is None:
        return None
    if rate <= 0:
        raise WorkloadError(f"rate {rate}: must be > 0 requests per second (or leave it out)")
    return [round(float(t), 3) for t in arrival_offsets(n, rate, seed=seed)]


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if value < 1:
            raise WorkloadError(f"{name.replace('_', '-')} {value}: must be >= 1")


def synth_rag(
    *,
    documents: int = 4,
    document_tokens: int = 600,
    questions_per_document: int = 12,
    question_tokens: int = 24,
    output_tokens: LengthSpec = LengthSpec(16, 32),
    rate: float | None = 3.0,
    shuffle: bool = True,
    seed: int = 0,
    tokenizer: PromptTokenizer | None = None,
) -> list[Record]:
    """Questions about shared documents (completions API): ``<document>\\n\\nQuestion: <q>\\nAnswer:``.

    Every document is the prefix of ``questions_per_document`` prompts; with ``shuffle`` the
    questions arrive in random order, so documents interleave as in a real retrieval service.
    """
    _check_counts(documents=documents, document_tokens=document_tokens, questions=questions_per_document)
    text = TextGenerator(seed, tokenizer, stream="rag")
    rng = random.Random(f"rag-{seed}")
    docs = [text.text(document_tokens) for _ in range(documents)]
    records: list[Record] = []
    for d, doc in enumerate(docs):
        for q in range(questions_per_document):
            question = text.text(question_tokens)
            records.append(
                {
                    "id": f"doc{d}-q{q}",
                    "prompt": f"{doc}\n\nQuestion: {question}\nAnswer:",
                    "max_tokens": output_tokens.sample(rng),
                }
            )
    if shuffle:
        rng.shuffle(records)
    return _with_times(records, _arrivals(len(records), rate, seed))


def _with_times(records: list[Record], times: list[float] | None) -> list[Record]:
    if times is None:
        return records
    return [{"timestamp": t, **r} for r, t in zip(records, times, strict=True)]


def synth_chat(
    *,
    sessions: int = 8,
    turns: int = 4,
    system_tokens: int = 300,
    document_tokens: int = 400,
    documents: int = 1,
    user_tokens: int = 32,
    output_tokens: LengthSpec = LengthSpec(16, 24),
    think_time: float = 2.0,
    rate: float | None = 0.5,
    seed: int = 0,
    tokenizer: PromptTokenizer | None = None,
) -> list[Record]:
    """Multi-turn support chat (chat API). Each turn's ``messages`` hold the full history.

    The system message is the shared system prompt followed by a product document (session ``s``
    uses document ``s % documents``). Before the new user message come the earlier user turns, each
    followed by an assistant message whose placeholder text has that turn's ``max_tokens`` length;
    a replayer may put the real earlier outputs in their place, in order. Sessions start at
    ``rate`` sessions per second (Poisson); without a rate, turns are interleaved round-robin.
    """
    _check_counts(sessions=sessions, turns=turns, documents=documents)
    if think_time < 0:
        raise WorkloadError(f"think-time {think_time}: must be >= 0 seconds")
    text = TextGenerator(seed, tokenizer, stream="chat")
    rng = random.Random(f"chat-{seed}")
    system_prompt = text.text(system_tokens)
    docs = [text.text(document_tokens) for _ in range(documents)]
    starts = _arrivals(sessions, rate, seed)
    keyed: list[tuple[float, int, int, Record]] = []
    for s in range(sessions):
        system = f"{system_prompt}\n\nProduct documentation:\n{docs[s % documents]}".strip()
        history: list[dict[str, str]] = [{"role": "system", "content": system}]
        for t in range(turns):
            history.append({"role": "user", "content": text.text(user_tokens)})
            max_tokens = output_tokens.sample(rng)
            record: Record = {"id": f"s{s}-t{t}", "session_id": f"s{s}"}
            if starts is not None:
                record["timestamp"] = round(starts[s] + t * think_time, 3)
            if t:
                record["think_time"] = think_time
            record["messages"] = [dict(m) for m in history]
            record["max_tokens"] = max_tokens
            keyed.append((record.get("timestamp", 0.0), t, s, record))
            history.append({"role": "assistant", "content": text.text(max_tokens)})
    keyed.sort(key=lambda k: (k[0], k[1], k[2]) if starts is not None else (k[1], k[2]))
    return [k[3] for k in keyed]


def synth_prefix_repeat(
    *,
    prefix_tokens: int = 512,
    suffixes: int = 16,
    suffix_tokens: int = 32,
    output_tokens: LengthSpec = LengthSpec(32, 32),
    rate: float | None = None,
    seed: int = 0,
    tokenizer: PromptTokenizer | None = None,
) -> list[Record]:
    """One prefix of ``prefix_tokens`` repeated with ``suffixes`` distinct suffixes (completions API)."""
    _check_counts(prefix_tokens=prefix_tokens, suffixes=suffixes, suffix_tokens=suffix_tokens)
    text = TextGenerator(seed, tokenizer, stream="prefix-repeat")
    rng = random.Random(f"prefix-{seed}")
    prefix = text.text(prefix_tokens)
    records: list[Record] = [
        {
            "id": f"suffix{k}",
            "prompt": f"{prefix}\n{text.text(suffix_tokens)}",
            "max_tokens": output_tokens.sample(rng),
        }
        for k in range(suffixes)
    ]
    return _with_times(records, _arrivals(len(records), rate, seed))
