"""Write the throughput workload of issue 31: many short requests, replayed at high concurrency.

Each request: one shared system line (a chat product's instructions, ~40 words, shorter than a
KV block chain worth caching much) plus a unique question of PROMPT_WORDS words (random words, so
no prefix is shared beyond the system line), and ``max_tokens`` drawn between OUT_MIN and OUT_MAX
(the replayer forces the length: the dummy model never stops on its own). No timestamps: the
driver replays it as a closed loop (``--concurrency``, 256 by default), as ``vllm bench serve
--max-concurrency`` and ``auto_tune.sh`` do, so throughput depends on the server's configuration:
``max-num-seqs`` below the concurrency queues requests (TTFT grows, throughput falls), and
``max-num-batched-tokens`` trades prefill chunking against decode steps. The SLO is on p90 TTFT.

    python3 benchmarks/gpu/throughput_workload.py OUT.jsonl [--requests 1200] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SYSTEM = (
    "You are a concise assistant for an online store. Answer in two sentences, name the product, "
    "quote the price from the catalogue, and never promise a delivery date you cannot check."
)
PROMPT_WORDS = (120, 260)  # unique words a request adds (about 1.3 tokens a word with a BPE tokenizer)
OUT_MIN, OUT_MAX = 64, 192


def _words(rng: random.Random, n: int) -> str:
    syllables = ["ka", "lo", "mi", "ren", "tas", "vo", "pel", "dri", "sun", "ar", "ek", "zu", "nor", "fi"]
    return " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(n))


def write_workload(path: Path, requests: int = 1200, seed: int = 0) -> dict[str, float]:
    """Write ``requests`` lines to ``path``; returns the mean prompt words and output tokens."""
    rng = random.Random(seed)
    words, outs = 0, 0
    with path.open("w") as f:
        for i in range(requests):
            n = rng.randint(*PROMPT_WORDS)
            out = rng.randint(OUT_MIN, OUT_MAX)
            words += n
            outs += out
            line = {"prompt": f"{SYSTEM}\nQuestion {i}: {_words(rng, n)}", "max_tokens": out}
            f.write(json.dumps(line) + "\n")
    return {
        "requests": requests,
        "mean_question_words": words / requests,
        "mean_output_tokens": outs / requests,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--requests", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(write_workload(a.out, a.requests, a.seed)))


if __name__ == "__main__":
    main()
