"""Starts to the grid's best with and without the latency model (issue 48): ``autotune run`` on the
real CPU build over the 12-configuration grid of benchmarks/predict_grid.py (the demo's model and
examples/rag.jsonl, vLLM's defaults with a 20 MiB pool as the baseline, objective p90 TTFT), once with
``--predict`` (the model fitted on the baseline enqueues its 3 best-predicted configurations, then
vetoes) and once without (the workload-aware prior's candidates, then Optuna's TPE), per seed.

For each run: the engine starts (trials that launched an engine: not a reused twin, not a veto),
and the start at which the study first launched the grid's best configuration (the lowest measured
p90 TTFT in predict_grid.json, ``--grid-json``) and the first start within ``--near`` of it
(configurations that tie within the host's run-to-run spread).

Done when (issue 48): with the model, the grid's best within 4 engine starts in 3 of 3 seeds.

    python benchmarks/predict_study.py                      # 3 seeds x (with: 4 trials, without: 8)
    python benchmarks/predict_study.py --seeds 0 --without-trials 0   # the model only, one seed
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import optuna

from autotune.study import read_record

GRID_JSON = c.REPO / "benchmarks" / "results" / "predict_grid.json"
SPACE = c.REPO / "benchmarks" / "data" / "predict_grid_space.yaml"
DEFAULT_JSON = c.REPO / "benchmarks" / "results" / "predict_study.json"
NOT_STARTED = {"predicted_worse", "prior", "bad_flag"}


def _key(values: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def grid_best(grid: Mapping[str, Any], near: float) -> tuple[str, set[str], dict[str, float]]:
    """The grid's best configuration, those within ``near`` of it, and every measured p90 (ms)."""
    measured = {r["key"]: r["measured"]["ttft_p90_ms"] for r in grid["rows"] if r.get("measured")}
    best = min(measured, key=lambda k: measured[k])
    close = {k for k, v in measured.items() if v <= measured[best] * (1 + near)}
    return best, close, measured


def starts_of(db: Path, study: str, baseline_key: str) -> list[dict[str, Any]]:
    """The study's trials in order: each one's configuration key, whether it started an engine."""
    st = optuna.load_study(study_name=study, storage=f"sqlite:///{db}")
    rows = []
    for t in sorted(st.get_trials(deepcopy=False), key=lambda t: t.number):
        if not t.state.is_finished():
            continue
        rec = read_record(t)
        started = (
            rec.duplicate_of is None and rec.failure not in NOT_STARTED and rec.status.value != "infeasible"
        )
        key = baseline_key if rec.baseline else _key(t.params)
        fc = t.user_attrs.get("forecast") or {}
        rows.append({
            "number": t.number, "key": key, "started": started, "status": rec.status.value,
            "failure": rec.failure, "ttft_p90_ms": rec.metric("ttft_p90") if rec.ok else None,
            "predicted_ms": fc.get("predicted_ms"), "verdict": fc.get("verdict"),
        })  # fmt: skip
    return rows


def _reached(rows: Sequence[Mapping[str, Any]], keys: set[str]) -> int | None:
    """The engine start (1-based) at which one of ``keys`` was first launched."""
    n = 0
    for r in rows:
        if r["started"]:
            n += 1
            if r["key"] in keys:
                return n
    return None


def run_once(args: Any, model: str, seed: int, predict: bool, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    study = "with" if predict else "without"
    trials = args.with_trials if predict else args.without_trials
    cmd = [
        sys.executable, "-m", "autotune", "run", "--workload", str(c.EXAMPLES / "rag.jsonl"), "--model", model,
        "--space", str(SPACE), "--objective", "ttft_p90", "--n-trials", str(trials), "--confirm-rounds", "0",
        "--seed", str(seed), "--studies-dir", str(work), "--study", study, "--out", str(work / "best.yaml"),
        "--predict" if predict else "--no-predict", "--profile", "cpu",
        *[f"--engine-arg={a}" for a in c.FIXED_ARGS], *[f"--baseline-arg={a}" for a in c.BASELINE_ARGS],
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(c.REPO), os.environ.get("PYTHONPATH")])),
    }
    t0 = time.monotonic()
    with (work / f"{study}.stdout").open("w") as out, (work / f"{study}.stderr").open("w") as err:
        rc = subprocess.run(cmd, cwd=c.REPO, env=env, stdout=out, stderr=err, check=False).returncode
    wall = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"autotune run exited {rc}: {(work / f'{study}.stderr').read_text()[-2000:]}")
    summary = [
        ln for ln in (work / f"{study}.stderr").read_text().splitlines()
        if ln.startswith(("ledger:", "veto", "audit:"))
    ]  # fmt: skip
    return {
        "seed": seed, "predict": predict, "n_trials": trials, "wall_s": wall, "command": " ".join(cmd),
        "trials": starts_of(work / f"{study}.db", study, args.baseline_key), "summary": summary,
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="comma-separated study seeds")
    p.add_argument("--with-trials", type=int, default=4, help="trials with the model (the baseline included)")
    p.add_argument("--without-trials", type=int, default=8, help="trials without it (0: not run)")
    p.add_argument("--grid-json", type=Path, default=GRID_JSON, help="predict_grid.py's results")
    p.add_argument(
        "--near", type=float, default=0.1, help="within this share of the best counts as reaching it"
    )
    p.add_argument("--work-dir-keep", type=Path, default=None, help="keep the studies here")
    args = p.parse_args(argv)
    c.setup_logging(args.verbose)
    if args.json_out is None:
        args.json_out = DEFAULT_JSON
    grid = json.loads(args.grid_json.read_text())
    args.baseline_key = _key(grid["baseline"])
    best, close, measured = grid_best(grid, args.near)
    model = c.bench_model(args.models_dir)
    root = args.work_dir_keep or args.work_dir / f"predict-study-{time.strftime('%Y%m%d-%H%M%S')}"
    load_start = c.load_average()
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for predict in (True, False):
            if not predict and args.without_trials <= 0:
                continue
            r = run_once(args, model, seed, predict, root / f"seed{seed}-{'with' if predict else 'without'}")
            r["starts"] = sum(t["started"] for t in r["trials"])
            r["best_at_start"] = _reached(r["trials"], {best})
            r["near_best_at_start"] = _reached(r["trials"], close)
            runs.append(r)
            c.log.info("seed %d %s: %d starts, best at start %s", seed, "with" if predict else "without",
                       r["starts"], r["best_at_start"])  # fmt: skip
    with_model = [r for r in runs if r["predict"]]
    payload = {
        "benchmark": "predict_study", "env": c.environment(), "grid_json": str(args.grid_json),
        "grid_best": best, "grid_best_p90_ms": measured[best], "near": args.near, "near_best": sorted(close),
        "runs": runs, "load_average": {"start": load_start, "end": c.load_average()},
        "done_when": {
            "best_within_4_starts_with_the_model": sum(
                r["best_at_start"] is not None and r["best_at_start"] <= 4 for r in with_model
            ),
            "of": len(with_model),
        },
    }  # fmt: skip
    c.write_json(args.json_out, payload)
    print(markdown(payload))
    return 0


def markdown(r: Mapping[str, Any]) -> str:
    rows = [
        [run["seed"], "with" if run["predict"] else "without", run["n_trials"], run["starts"],
         run["best_at_start"] or "not reached", run["near_best_at_start"] or "not reached", f"{run['wall_s']:.0f}",
         " / ".join(run["summary"][:2])]
        for run in r["runs"]
    ]  # fmt: skip
    dw = r["done_when"]
    return "\n".join([
        c.md_header("Starts to the grid's best, with and without the latency model (predict_study.py)", r["env"], r["load_average"]),
        f"Grid's best: {r['grid_best']} ({r['grid_best_p90_ms']:.1f} ms p90); within {r['near']:.0%}: {', '.join(r['near_best'])}\n",
        c.md_table(["seed", "model", "trials", "engine starts", "best at start", "within 10% at start", "wall s", "ledger"], rows),
        f"\nWith the model, the grid's best within 4 starts in {dw['best_within_4_starts_with_the_model']} of {dw['of']} seeds.",
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
