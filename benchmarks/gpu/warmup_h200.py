"""Issue 14 on the H200: the workload-shaped warm-up against the short one, on fresh engines.

Fresh engines in pairs, each pair one engine with the short unrelated warm-up (2 requests of 24
words) and one with the tool's workload-shaped warm-up (the workload's 2 longest requests, words
shuffled, sent together, then the prefix cache emptied), both measured by the tool's own evaluator
with 2 passes per engine. Pairs alternate between the configurations given (vLLM's defaults, and an
offload configuration, where the cache reset after the warm-up must also empty the host tier).
What is read: the first pass's p90 against the second's (the warm-up's job is to make them equal),
each pass's prefix-hit rate (a warm-up that primed the workload would raise pass 1's), and the
notes (a reset refused, a leak). Each engine is appended to OUT/warmup.json as soon as it is
measured, so a call cut short keeps what it measured; a later call resumes the pair sequence.

    bash .gpu/s/install.sh c2 && source .gpu/s/env.sh && PYTHONPATH=$PWD:$PYTHONPATH \
      python3 benchmarks/gpu/warmup_h200.py --out "$OUT" --budget 420

On the CPU build (a dry run of this script): --model M --workload examples/rag.jsonl
--space search_spaces/cpu.yaml --launcher '' --engine-arg=--enforce-eager --config '{}'
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path
from typing import Any

from autotune.space import EngineConfig
from autotune.studyfile import StudySpec
from autotune.tuning import build_setup

LAUNCHER = "python3 -m vllm.entrypoints.cli.main serve"
CONFIGS = ("{}", '{"max_num_batched_tokens": 16384, "cpu_swap_space_gb": 16}')
ENGINE_ARGS = ("--load-format=dummy", "--max-model-len=8192", "--gpu-memory-utilization=0.15")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget", type=float, default=420.0, help="seconds: no engine starts after this")
    p.add_argument("--engine-s", type=float, default=120.0, help="expected seconds per engine")
    p.add_argument("--model", default="/root/m8b")
    p.add_argument("--workload", type=Path, default=Path("benchmarks/gpu/rag_long.jsonl"))
    p.add_argument("--space", type=Path, default=Path("benchmarks/gpu/space_h200_long.yaml"))
    p.add_argument("--launcher", default=LAUNCHER)
    p.add_argument("--engine-arg", action="append", dest="engine_args")
    p.add_argument("--config", action="append", dest="configs", help="JSON of space values (repeatable)")
    p.add_argument("--cache", type=Path, default=Path("/root/wu-cache"))
    args = p.parse_args()
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "warmup.json"
    runs: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    configs = [json.loads(c) for c in (args.configs or CONFIGS)]
    choices = StudySpec(
        workload=args.workload,
        model=args.model,
        space=args.space,
        engine_args=tuple(args.engine_args if args.engine_args is not None else ENGINE_ARGS),
        launcher=args.launcher or None,
        passes="2",
        compile_cache=args.cache,
    )
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        evaluator = setup.evaluator(args.out / "logs")
        while time.monotonic() - t0 + args.engine_s < args.budget:
            i = len(runs)
            warmup, values = ("short", "like")[i % 2], configs[(i // 2) % len(configs)]
            evaluator.warmup_like_workload = warmup == "like"
            t = time.monotonic()
            rec = evaluator(i, EngineConfig.chosen(setup.space, values))
            entry = {
                "engine": i,
                "warmup": warmup,
                "config": values,
                "status": rec.status.value,
                "reason": rec.reason,
                "ttft_p90": rec.figures.get("ttft_p90") if rec.figures else None,
                "passes": [dict(x) for x in rec.passes],
                "notes": list(rec.notes),
                "timings_s": dict(rec.timings_s),
                "wall_s": round(time.monotonic() - t, 1),
                "command": shlex.join(rec.command),
            }
            runs.append(entry)
            path.write_text(json.dumps(runs, indent=1))
            print(json.dumps({k: entry[k] for k in ("engine", "warmup", "config", "status", "ttft_p90", "wall_s")}),
                  [(x.get("ttft_p90"), x.get("prefix_hit_rate"), x.get("host_hit_rate")) for x in entry["passes"]],
                  entry["notes"], flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
