"""A tiny random-weight Llama model, generated locally in seconds (no downloads).

The CPU build of vLLM serves it like any other model; its outputs are gibberish, so
requests force their length with ``max_tokens`` and ``ignore_eos``. Used by the demo
and the tests. Needs ``torch``, ``transformers`` and ``tokenizers`` (all come with vLLM).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

__all__ = ["TINY_WORDS", "make_tiny_model"]

TINY_WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "for",
    "on",
    "with",
    "that",
    "by",
    "this",
    "as",
    "are",
    "be",
    "at",
    "from",
    "or",
    "it",
    "an",
    "was",
    "cache",
    "token",
    "prefix",
    "swap",
    "memory",
    "gpu",
    "block",
    "batch",
    "latency",
    "throughput",
    "model",
    "request",
    "document",
    "question",
    "answer",
    "support",
    "customer",
    "order",
    "refund",
    "policy",
    "shipping",
    "product",
    "account",
    "billing",
    "invoice",
    "warranty",
    "return",
    "device",
    "network",
    "server",
    "storage",
    "config",
]

_MARKER = "autotune-tiny-model.json"


def make_tiny_model(out: Path, *, vocab_size: int = 1000, layers: int = 2, seed: int = 0) -> Path:
    """Write a tokenizer and a random-weight 2-layer Llama to ``out``; reuse it if already there."""
    out = Path(out)
    spec = {"vocab_size": vocab_size, "layers": layers, "seed": seed, "version": 1}
    marker = out / _MARKER
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = [" ".join(rng.choice(TINY_WORDS) for _ in range(40)) for _ in range(2000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=max(len(fast), vocab_size),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=8192,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)  # type: ignore[no-untyped-call,arg-type]
    model.save_pretrained(out)
    marker.write_text(json.dumps(spec))
    return out
