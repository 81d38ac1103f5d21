"""Print the GPU section of benchmarks/RESULTS.md from the H200 run's own files (no figure typed by hand).

python benchmarks/gpu/report.py benchmarks/gpu/results
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import optuna

from autotune.memory import ModelShape, estimate_memory, weight_bytes
from autotune.study import read_record

M8B_CONFIG = {  # the 8B-shaped Llama of ../shared/gpu/mk_model.py (vocabulary 371 tokens)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 371,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 8192,
    "dtype": "bfloat16",
    "tie_word_embeddings": False,
}
H200_TOTAL = 143771 * 2**20  # nvidia-smi memory.total on the lent H200


def main(results: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = results / "resume-call" / "studies" / "h200.db"
    study = optuna.load_study(study_name="h200", storage=f"sqlite:///{db}")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps(M8B_CONFIG))
        shape = ModelShape.from_config(cfg)
    weights = weight_bytes(None, shape)
    print(
        "| # | gpu-mem-util | max-batched | block | offload GiB | TTFT p50 ms | TTFT p90 ms | out tok/s |"
        " GPU prefix hit | CPU offload hit | KV tokens (vLLM) | KV tokens (estimate) | peak GPU GiB |"
        " peak RSS GiB | start s |"
    )
    print("|" + "---|" * 15)
    for t in study.get_trials():
        rec, p = read_record(t), t.params
        f, m, mem, kv = rec.figures, rec.metrics, rec.memory, rec.kv_tokens
        assert f is not None and m is not None and kv is not None, f"trial {t.number} was not measured"
        util = p.get("gpu_memory_utilization", 0.15)
        est = estimate_memory(
            shape,
            weight_bytes=weights,
            gpu_total_bytes=H200_TOTAL,
            gpu_memory_utilization=util,
            max_model_len=8192,
            block_size=p.get("block_size", 16),
            max_num_batched_tokens=p.get("max_num_batched_tokens", 8192),
            cuda_graphs=False,
        )
        label = "0 (baseline)" if rec.baseline else str(t.number)
        print(
            f"| {label} | {util} | {p.get('max_num_batched_tokens', '8192 (default)')} | "
            f"{p.get('block_size', '16 (default)')} | {p.get('cpu_swap_space_gb', 0)} | "
            f"{f.metric('ttft_p50'):.1f} | {f.metric('ttft_p90'):.1f} | "
            f"{f.output_throughput:.1f} | {m.prefix_hit_rate:.1%} | {m.host_hit_rate:.1%} | "
            f"{kv:,} | {est.kv_tokens:,} ({(est.kv_tokens - kv) / kv:+.1%}) | "
            f"{max(mem['gpu_used_peak']) / 2**30:.1f} | {mem['rss_peak'] / 2**30:.1f} | {rec.startup_s:.0f} |"
        )
    cmp = json.loads((results / "compare-call" / "compare.json").read_text())
    print()
    print("| figure | A: defaults (util 0.15) median [min-max] | B: exported best median [min-max] | B / A |")
    print("|---|---|---|---|")
    for name in ("ttft_p50", "ttft_p90", "tpot_p50", "output_throughput", "prefix_hit_rate"):
        a_med, b_med = cmp["a"]["median"].get(name), cmp["b"]["median"].get(name)
        a_sp, b_sp = cmp["a"]["spread"].get(name), cmp["b"]["spread"].get(name)
        ratio = b_med / a_med if a_med else float("nan")
        print(
            f"| {name} | {a_med:.3g} [{a_sp[0]:.3g}-{a_sp[1]:.3g}] | {b_med:.3g} [{b_sp[0]:.3g}-{b_sp[1]:.3g}] |"
            f" {ratio:.2f}x |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
