"""Trials per wall-minute with 1 worker and with N (issue 15): the same workload, space and flags,
one fresh study per configuration, each given the same wall time (``--minutes``); workers stop
starting trials at the deadline and the wall time runs until the last one finished.

    # on a GPU host, 1 GPU then 2 (the H200 pair): a study of --minutes each
    python benchmarks/parallel_workers.py --gpus 0 --gpus 0,1 --minutes 10 \\
        --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b --space benchmarks/gpu/space_h200.yaml \\
        --launcher "python3 -m vllm.entrypoints.cli.main serve" --engine-arg=--load-format=dummy \\
        --engine-arg=--max-model-len=8192 --engine-arg=--enforce-eager --engine-arg=--gpu-memory-utilization=0.15
    # here, without GPUs: 1 and 2 CPU workers against the fake server (a start-up of 3 s per trial)
    python benchmarks/parallel_workers.py --fake --workers 1 --workers 2 --minutes 1

Prints one row per configuration (trials finished; launched, i.e. an engine was started for it, not
a reused measurement of a re-proposed configuration; ok; wall minutes; launched trials per minute;
speed-up over the first) and writes them as JSON to ``--json-out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

from autotune.studyfile import StudySpec
from autotune.tuning import (
    RUN_ATTR,
    build_setup,
    open_study,
    plan_baseline,
    plan_groups,
    run_parallel,
)

REPO = Path(__file__).resolve().parent.parent


def _measure(
    choices: StudySpec, label: str, gpus: str | None, workers: int | None, args: Any
) -> dict[str, Any]:
    studies = Path(args.studies_dir)
    name = f"par-{label.replace(',', '_')}-{int(time.time())}"
    with build_setup(choices) as setup:
        groups = plan_groups(setup, gpus, workers=workers)
        opened = open_study(setup, name, None, studies, args.seed, plan_baseline(setup))
        t0 = time.monotonic()
        run_parallel(
            setup, opened.study, opened.directory, groups, storage=None, studies_dir=studies,
            n_trials=10_000, timeout_s=args.minutes * 60, seed=args.seed, say=print,
        )  # fmt: skip
        wall = time.monotonic() - t0
    trials = [t for t in opened.study.get_trials() if t.user_attrs.get(RUN_ATTR)]
    done = [t for t in trials if t.state.is_finished()]
    # launched: an engine was started for it (not a re-proposed configuration whose measurement was
    # reused, not rejected before launch): what the GPUs did
    launched = [
        t
        for t in done
        if t.user_attrs.get("duplicate_of") is None and t.user_attrs.get("status") != "infeasible"
    ]
    return {
        "config": label,
        "workers": len(groups),
        "devices": [g.describe() for g in groups],
        "trials": len(done),
        "launched": len(launched),
        "ok": sum(t.user_attrs.get("status") == "ok" for t in launched),
        "wall_min": round(wall / 60, 2),
        "launched_per_min": round(len(launched) / (wall / 60), 3),
        "study": name,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--gpus", action="append", default=[], help="A configuration: GPUs, e.g. 0 or 0,1 (repeat)."
    )
    p.add_argument("--workers", action="append", type=int, default=[], help="A configuration without GPUs.")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--workload", type=Path, default=REPO / "examples" / "rag.jsonl")
    p.add_argument("--model", default=None)
    p.add_argument("--space", type=Path, default=None)
    p.add_argument("--launcher", default=None)
    p.add_argument("--engine-arg", action="append", default=[])
    p.add_argument("--speed", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--studies-dir", default="studies-parallel")
    p.add_argument("--fake", action="store_true", help="the fake server (3 s start-up) and a tiny config")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model, launcher, space, engine_args = args.model, args.launcher, args.space, list(args.engine_arg)
    if args.fake:
        model, launcher = c.fake_engine(Path(args.studies_dir), 3)
        space = space or REPO / "search_spaces" / "cpu.yaml"
        engine_args += ["--max-model-len=2048", "--kv-cache-memory-bytes=64M"]
    if model is None:
        p.error("--model is required (or --fake)")
    choices = StudySpec(
        workload=args.workload, model=model, space=space, launcher=launcher, engine_args=tuple(engine_args),
        speed=args.speed, seed=args.seed, check_args=not args.fake,
    )  # fmt: skip
    configs: list[tuple[str, str | None, int | None]] = [(g, g, None) for g in args.gpus]
    configs += [(f"{n} workers", None, n) for n in args.workers]
    rows = [_measure(choices, label, gpus, workers, args) for label, gpus, workers in configs]
    first = rows[0]["launched_per_min"] if rows else 0
    head = f"{'config':<12} {'workers':>7} {'trials':>6} {'launched':>8} {'ok':>4} {'wall min':>8} {'launched/min':>12} {'x':>5}"
    print("\n" + head)
    for r in rows:
        speedup = r["launched_per_min"] / first if first else float("nan")
        r["speedup"] = round(speedup, 2)
        print(
            f"{r['config']:<12} {r['workers']:>7} {r['trials']:>6} {r['launched']:>8} {r['ok']:>4} "
            f"{r['wall_min']:>8} {r['launched_per_min']:>12} {speedup:>5.2f}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
