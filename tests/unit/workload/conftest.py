from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.workload import ModelTokenizer, load_tokenizer

DATA = Path(__file__).resolve().parents[2] / "data" / "workloads"

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer (vocab 600) with a chat template, saved like a model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiou"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(400)]
    words += ["the", "a", "of", "and", "to", "in", "is", "for", "cache", "token", "prefix", "question"]
    corpus = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(500)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    out = tmp_path_factory.mktemp("tiny-tokenizer")
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_tokenizer_dir: Path) -> ModelTokenizer:
    return load_tokenizer(tiny_tokenizer_dir)


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def write_lines(tmp_path: Path) -> Callable[..., Path]:
    """Write the given lines to ``<tmp>/<name>`` and return the path."""

    def write(*lines: str, name: str = "w.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    return write
