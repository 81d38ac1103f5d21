"""Token counting: the target model's tokenizer when there is one, an approximate word count otherwise.

Two tokenizers share one small interface (:class:`PromptTokenizer`):

- :class:`ModelTokenizer` wraps a Hugging Face tokenizer loaded from a local model directory
  (never downloads). Chat requests go through the model's chat template, as vLLM's chat endpoint
  does; completions prompts are encoded with the tokenizer's special tokens.
- :class:`WordTokenizer` splits on words and punctuation (``\\w+|[^\\w\\s]``): one token per word,
  a rough stand-in used when no model is given. Reports say when it was used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Protocol

from autotune.errors import WorkloadError
from autotune.workload._model import WorkloadRequest

__all__ = [
    "ModelTokenizer",
    "PromptTokenizer",
    "WordTokenizer",
    "count_tokens",
    "load_tokenizer",
]

_WORD_RE = re.compile(r"\w+|[^\w\s]")


class PromptTokenizer(Protocol):
    """What workload code needs from a tokenizer."""

    @property
    def name(self) -> str:
        """Short description for reports, e.g. ``model /models/llama`` or ``words (approximate)``."""
        ...

    @property
    def is_exact(self) -> bool:
        """True when counts are the target model's own tokens."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` alone (no special tokens)."""
        ...

    def prompt_ids(self, request: WorkloadRequest) -> list[int]:
        """Token ids of the prompt as the server sees it (chat template applied)."""
        ...


class WordTokenizer:
    """One token per word or punctuation mark; ids are interned per instance."""

    name = "words (approximate: 1 token = 1 word or punctuation mark)"
    is_exact = False

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        vocab = self._vocab
        return [vocab.setdefault(word, len(vocab)) for word in _WORD_RE.findall(text)]

    def prompt_ids(self, request: WorkloadRequest) -> list[int]:
        return self.encode(request.text())


class _HFTokenizer(Protocol):
    chat_template: Any

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any: ...


class ModelTokenizer:
    """A Hugging Face tokenizer (anything with ``encode`` and ``apply_chat_template``)."""

    is_exact = True

    def __init__(self, tokenizer: Any, name: str = "model tokenizer") -> None:
        self._tok: _HFTokenizer = tokenizer
        self.name = name

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def prompt_ids(self, request: WorkloadRequest) -> list[int]:
        if request.messages is not None and self.has_chat_template:
            messages = [m.as_dict() for m in request.messages]
            text = self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            # The rendered template carries its own special tokens (vLLM encodes it without adding more).
            return list(self._tok.encode(str(text), add_special_tokens=False))
        return list(self._tok.encode(request.text(), add_special_tokens=True))


def load_tokenizer(model_dir: Path | str) -> ModelTokenizer:
    """Load the tokenizer of a local model directory, offline. Raises :class:`WorkloadError`."""
    path = Path(model_dir)
    if not path.is_dir():
        raise WorkloadError(f"{path}: model directory not found (pass --model a local model directory)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # transformers raises many kinds (OSError, ValueError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(
            f"{path}: cannot load a tokenizer: {first} (the directory needs tokenizer files)"
        ) from exc
    return ModelTokenizer(tok, name=f"model {path}")


def count_tokens(text: str, tokenizer: PromptTokenizer | None = None) -> int:
    """Tokens of ``text`` without special tokens; words when no tokenizer is given."""
    if tokenizer is None:
        return len(_WORD_RE.findall(text))
    return len(tokenizer.encode(text))
