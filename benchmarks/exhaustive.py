"""Every configuration of a search space, measured once each, as a study trial measures it: the
yardstick a short study is held to (issue 14: a 10-minute study against an exhaustive run).

The grid is the product of the space's categorical choices, enqueued into one study (the baseline,
vLLM's defaults, first) and run by the tool's own workers, one per GPU, with the prior and pruning
off and every other choice as ``autotune run`` makes it. Re-running the same command resumes: grid
points already finished are not enqueued again.

    # on the lent pair of H200s, both GPUs (see benchmarks/gpu/round2_h200.sh)
    python benchmarks/exhaustive.py --gpus 0,1 --workload benchmarks/gpu/rag_long.jsonl --model /root/m8b \\
        --space benchmarks/gpu/space_h200_long.yaml --launcher "python3 -m vllm.entrypoints.cli.main serve" \\
        --engine-arg=--load-format=dummy --engine-arg=--max-model-len=8192 \\
        --engine-arg=--gpu-memory-utilization=0.15 --passes 1 --studies-dir /root/r2 --study long-grid
    # here, without GPUs: the fake server (a start-up of 1 s per trial)
    python benchmarks/exhaustive.py --fake --studies-dir /tmp/grid --study g

Prints one row per configuration (its objective, status, start-up seconds) and the wall time, and
writes them as JSON to ``--json-out``.
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
from search_efficiency import grid_points, key

from autotune.errors import AutotuneError
from autotune.study import read_record
from autotune.studyfile import StudySpec
from autotune.tuning import (
    build_setup,
    open_study,
    plan_baseline,
    plan_groups,
    run_parallel,
)

REPO = Path(__file__).resolve().parent.parent


def _check_categorical(space: Any) -> None:
    for name, p in space.tunable.items():
        if p.type != "bool" and not p.choices:
            raise SystemExit(f"{name}: not categorical; an exhaustive run needs choices (fix: list them)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default=None, help="GPUs, one worker each, e.g. 0,1 (default: one worker).")
    p.add_argument("--workload", type=Path, default=REPO / "examples" / "rag.jsonl")
    p.add_argument("--model", default=None)
    p.add_argument("--space", type=Path, default=None)
    p.add_argument("--launcher", default=None)
    p.add_argument("--engine-arg", action="append", default=[])
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--passes", default="1")
    p.add_argument("--minutes", type=float, default=None, help="Stop starting trials after this long.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--studies-dir", type=Path, default=Path("studies-grid"))
    p.add_argument("--study", default="grid")
    p.add_argument("--fake", action="store_true", help="the fake server (1 s start-up) and a tiny config")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model, launcher, space, engine_args = args.model, args.launcher, args.space, list(args.engine_arg)
    if args.fake:
        model, launcher = c.fake_engine(args.studies_dir, 1)
        space = space or REPO / "benchmarks" / "data" / "grid_space.yaml"
        engine_args += ["--max-model-len=2048"]
    if model is None:
        p.error("--model is required (or --fake)")
    choices = StudySpec(
        workload=args.workload, model=model, space=space, launcher=launcher, engine_args=tuple(engine_args),
        speed=args.speed, seed=args.seed, check_args=not args.fake,
        passes=args.passes, prune=False, prior=False,
    )  # fmt: skip
    with build_setup(choices) as setup:
        groups = plan_groups(setup, args.gpus, workers=None if args.gpus else 1)
        if groups[0].gpus:
            setup = setup.watching_gpus(groups[0].gpus)
        opened = open_study(setup, args.study, None, args.studies_dir, args.seed, plan_baseline(setup))
        study = opened.study
        present = {  # measured, or enqueued and waiting (its values in fixed_params)
            key(t.params or t.system_attrs.get("fixed_params") or {})
            for t in study.get_trials(deepcopy=False)
        }
        _check_categorical(setup.space)
        points = grid_points(setup.space)
        todo = [pt for pt in points if key(pt) not in present]
        for pt in todo:
            study.enqueue_trial(pt)
        waiting = sum(not t.state.is_finished() for t in study.get_trials(deepcopy=False))
        print(f"grid of {len(points)} configurations; {len(todo)} enqueued now, {waiting} to run")
        t0 = time.monotonic()
        run_parallel(
            setup, study, opened.directory, groups, storage=None, studies_dir=args.studies_dir,
            n_trials=waiting, timeout_s=args.minutes * 60 if args.minutes else None, seed=args.seed, say=print,
        )  # fmt: skip
        wall = time.monotonic() - t0
        metric = setup.objective.metric
    rows: list[dict[str, Any]] = []
    for t in study.get_trials():
        if not t.state.is_finished():
            continue
        rec = read_record(t)
        rows.append(
            {
                "trial": t.number,
                "params": t.params or {"(baseline)": "vLLM defaults"},
                "status": rec.status.value,
                metric: rec.figures.get(metric) if rec.ok and rec.figures else None,
                "prefix_hit_rate": rec.metrics.prefix_hit_rate if rec.ok and rec.metrics else None,
                "startup_s": rec.startup_s,
                "gpus": t.user_attrs.get("gpus"),
            }
        )
    for r in rows:
        value = r[metric]
        print(
            f"#{r['trial']:>3} {r['status']:<10} {metric}={'-' if value is None else f'{value:.1f}'} "
            f"start {r['startup_s'] or 0:.0f} s gpus {r['gpus']} {r['params']}"
        )
    ok = [r for r in rows if r[metric] is not None]
    best = min(ok, key=lambda r: r[metric]) if ok else None
    print(f"wall {wall / 60:.2f} min, {len(rows)} finished; best: {best}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(
            json.dumps(
                {"metric": metric, "wall_min": round(wall / 60, 2), "rows": rows, "best": best}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
