"""A 1.5B-shaped Qwen2 config (Qwen2.5-1.5B's layer shapes) beside the kit's 8B-shaped Llama, with the
same tokenizer, for issue 47 item 1 (a smaller chat model co-located with the RAG model). No weights:
serve it with ``--load-format dummy``. The tokenizer's vocabulary is the kit's tiny one, so the weights
are the 28 layers' (about 1.31B parameters, 2.4 GiB in bf16) and its KV is 28,672 B/token.

Device side, after ``bash .gpu/s/install.sh c1`` (which writes /root/m8b):
    python3 benchmarks/gpu/mk_small_model.py /root/m8b /root/m1p5b
"""

from __future__ import annotations

import os
import shutil
import sys

from transformers import AutoTokenizer, Qwen2Config


def main(src: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(src):  # the tokenizer's files: everything but the 8B model's config
        if name != "config.json" and os.path.isfile(os.path.join(src, name)):
            shutil.copy2(os.path.join(src, name), os.path.join(out, name))
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        head_dim=128,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    cfg.dtype = "bfloat16"
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.save_pretrained(out)
    print(sorted(os.listdir(out)), "vocab", len(tok))


if __name__ == "__main__":
    main(*sys.argv[1:3])
