"""Predicted next to measured (issue 48): over a 12-configuration grid of the demo's space on the real
CPU build, the calibrated latency model (:mod:`autotune.predict`) predicts each configuration's p90
TTFT before it is measured.

The grid (benchmarks/data/predict_grid_space.yaml): kv_cache_memory_bytes 20/32/128 MiB x
max_num_batched_tokens 512/2048 x prefix caching on/off, on the demo's model (the 8-layer tiny
Llama), fixed flags and workload (examples/rag.jsonl at its own timestamps). The baseline (vLLM's
defaults with the demo's 20 MiB pool) is measured first, the other 11 in a shuffled order
(``--seed``). Each configuration is started fresh and measured as a study trial measures (the
tool's set-up: memory estimate, warm-up, replay at the workload's arrivals).

Two ways of predicting, both reported:
- **from the baseline alone**: the model fitted on the baseline's per-request timings predicts all
  12 (the baseline in-sample);
- **as it goes**: before each configuration is measured, the model fitted on every configuration
  measured so far predicts it; the ledger sets each prediction's interval from the errors measured
  before it (the first 3: a default +-50%, no veto).

Done when (issue 48): p90 TTFT within 20% for at least 9 of 12, the grid's best (lowest measured p90
TTFT) in the model's top 3, and at least 80% of the measured figures inside their intervals.

    python benchmarks/predict_grid.py                 # real CPU build: 12 starts (about 10-15 min)
    python benchmarks/predict_grid.py --quick         # the fake server (tests/fakes): the plumbing, 1-2 min
    python benchmarks/predict_grid.py --dry-run       # no engine: synthetic measurements of known cost

Writes the JSON to ``--json-out`` (default benchmarks/results/predict_grid.json; none with
``--quick`` or ``--dry-run`` unless given) and the calibration the study would save (``--calibration-out``,
default next to the JSON), which ``autotune predict --calibration FILE`` reads.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import numpy as np

from autotune.predict import (
    Calibration,
    Candidate,
    EngineCosts,
    EngineDefaults,
    LatencyModel,
    MeasuredTrial,
    RequestTimes,
    WorkloadShape,
    candidate_of,
    grid_of,
    kv_bytes_of,
    simulate,
    this_machine,
    workload_shape,
)
from autotune.space import EngineConfig, load_search_space
from autotune.workload import load_workload

SPACE = c.REPO / "benchmarks" / "data" / "predict_grid_space.yaml"
WORKLOAD = c.EXAMPLES / "rag.jsonl"
DEFAULT_JSON = c.REPO / "benchmarks" / "results" / "predict_grid.json"
BASELINE = {"kv_cache_memory_bytes": 20, "max_num_batched_tokens": 2048, "enable_prefix_caching": True}
# the CPU build's defaults and the bench model's KV bytes per token (8 layers x K, V x 4 heads x 64 x 2 B)
CPU_DEFAULTS = EngineDefaults(
    kv_tokens=2560, kv_bytes_per_token=8192, block_size=128, batched_tokens=2048, max_seqs=128
)
# what the dry run's fake engine costs (and the model must find)
DRY_COSTS = EngineCosts(
    overhead_s=0.006, prefill_s_per_token=25e-6, decode_slowdown_s=0.0, step_s=0.004, step_s_per_seq=0.0004
)
WITHIN = 0.2

Measure = Callable[[Mapping[str, Any], Candidate], MeasuredTrial | None]


def _key(values: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def run_grid(
    points: Sequence[Mapping[str, Any]],
    candidate: Callable[[Mapping[str, Any]], Candidate],
    measure: Measure,
    shape: WorkloadShape,
    seed: int,
    baseline: Mapping[str, Any] = BASELINE,
) -> tuple[dict[str, Any], LatencyModel]:
    """Measure the baseline, then the rest in a shuffled order, predicting each before it is measured."""
    base = next(p for p in points if _key(p) == _key(baseline))
    rest = [p for p in points if _key(p) != _key(baseline)]
    random.Random(seed).shuffle(rest)
    model = LatencyModel(shape)
    done: list[MeasuredTrial] = []
    rows: list[dict[str, Any]] = []
    from_baseline: dict[str, dict[str, Any]] = {}
    for order, values in enumerate([base, *rest]):
        cand = candidate(values)
        before = model.predict(cand) if done else None
        t0 = time.monotonic()
        trial = measure(values, cand)
        row: dict[str, Any] = {
            "order": order,
            "values": dict(values),
            "key": _key(values),
            "wall_s": time.monotonic() - t0,
        }
        row["predicted"] = before.as_dict() if before else None
        if trial is None:
            row["measured"] = None
            rows.append(row)
            continue
        row["measured"] = {  # as the trial reports them: medians over its passes
            "ttft_p50_ms": trial.median(lambda p: p.ttft_ms(50)),
            "ttft_p90_ms": trial.ttft_p90_ms(),
            "tpot_p50_ms": trial.median(lambda p: p.tpot_ms(50)),
            "passes": len(trial.passes), "ok": sum(int(p.ok.sum()) for p in trial.passes),
            "requests": sum(len(p.ok) for p in trial.passes), "kv_tokens": trial.candidate.gpu_kv_tokens,
        }  # fmt: skip
        if before is not None:
            entry = model.ledger.add(before, trial.ttft_p90_ms(), label=row["key"])
            row.update(error=entry.error, inside=entry.inside)
        done.append(trial)
        model.fit(done)
        row["costs_after"] = model.costs.as_dict() if model.costs else None
        if order == 0:  # the model from the baseline alone, on every point of the grid
            from_baseline = {_key(p): model.predict(candidate(p)).as_dict() for p in points}
        rows.append(row)
        c.log.info("%d/%d %s: predicted %s, measured p90 %.1f ms", order + 1, len(points), row["key"],
                   "-" if before is None else f"{before.ttft_p90_ms:.1f} ms", trial.ttft_p90_ms())  # fmt: skip
    final = {_key(p): model.predict(candidate(p)).as_dict() for p in points}
    return {
        "rows": rows,
        "from_baseline": from_baseline,
        "final": final,
        "verdict": verdict(rows, from_baseline, model),
    }, model


def _accuracy(
    rows: Sequence[Mapping[str, Any]], predicted: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """How many measured configurations ``predicted`` had within 20%, and whether its top 3 holds the best."""
    measured = {r["key"]: r["measured"]["ttft_p90_ms"] for r in rows if r["measured"]}
    if not measured or not predicted:
        return {"within_20": 0, "of": len(measured), "best_in_top3": False}
    within = sum(abs(predicted[k]["ttft_p90_ms"] - m) <= WITHIN * m for k, m in measured.items())
    best = min(measured, key=lambda k: measured[k])
    top3 = sorted(measured, key=lambda k: predicted[k]["ttft_p90_ms"])[:3]
    return {
        "within_20": within,
        "of": len(measured),
        "best": best,
        "predicted_top3": top3,
        "best_in_top3": best in top3,
        # configurations can tie within the run-to-run spread: how much worse the model's first pick measured
        "top1_regret": measured[top3[0]] / measured[best] - 1,
    }


def verdict(
    rows: Sequence[Mapping[str, Any]], from_baseline: Mapping[str, Any], model: LatencyModel
) -> dict[str, Any]:
    summary = model.ledger.summary()
    seq = [r for r in rows if r.get("predicted") and r["measured"]]
    as_it_goes = {r["key"]: r["predicted"] for r in seq}
    out = {
        "from_baseline": _accuracy(rows, from_baseline),
        "as_it_goes": {
            **_accuracy(seq, as_it_goes),
            "inside": summary.inside,
            "predictions": summary.predictions,
        },
        "ledger": summary.line(),
    }
    fb, go = out["from_baseline"], out["as_it_goes"]
    out["done_when"] = {
        "within_20_at_least_9_of_12_from_baseline": fb["within_20"] >= 9,
        "best_in_top3_from_baseline": fb["best_in_top3"],
        "coverage_at_least_80pct": bool(go["predictions"]) and go["inside"] >= 0.8 * go["predictions"],
    }
    return out


# -- the real CPU build ------------------------------------------------------------------------------
def _real(args: Any, model_dir: str) -> tuple[dict[str, Any], LatencyModel, EngineDefaults, str]:
    """Each configuration measured by the study's own evaluator (a fresh engine, warm-up, the replay,
    the per-request timings it keeps as ``.requests.npz``), numbered from 0 in measurement order."""
    from autotune.trial import read_request_timings
    from autotune.tuning import build_setup

    log_dir = args.work_dir / f"predict-grid-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    workload = (
        args.workload
        if args.workload.is_file() and args.workload != WORKLOAD
        else c.example_workload(WORKLOAD.name, quick=args.quick, work_dir=log_dir)
    )
    choices = c.tuning_choices(
        model_dir, workload, quick=args.quick, speed=args.speed, space=args.space, fixed=args.fixed,
        baseline=args.baseline_args, profile=args.profile, startup_timeout=args.startup_timeout,
        launcher=args.launcher,
    )  # fmt: skip
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        guard = setup.guard
        if guard is None:
            raise SystemExit("the memory estimate is off: each configuration's KV tokens are unknown")
        # until the baseline's engine says how many tokens its size holds; on another engine (the GPU
        # script), its own defaults with the memory estimate's block and bytes per token
        defaults = CPU_DEFAULTS if args.engine_defaults is None else _engine_defaults(setup, args)
        space, evaluate = setup.space, setup.evaluator(log_dir)
        numbers = iter(range(1000))

        def candidate(values: Mapping[str, Any]) -> Candidate:
            """As the prior sizes it: the memory estimate of the argv the configuration launches."""
            est = guard.check(setup.sizing(EngineConfig.chosen(space, values))).estimate
            cand = candidate_of(space, values, defaults)
            return (
                cand
                if est is None
                else dataclasses.replace(cand, gpu_kv_tokens=est.kv_tokens, block_size=est.block_size)
            )

        def measure(values: Mapping[str, Any], cand: Candidate) -> MeasuredTrial | None:
            rec = evaluate(next(numbers), EngineConfig.chosen(space, values))
            if not rec.ok or rec.requests_path is None:
                c.log.warning("%s: %s %s", _key(values), rec.status.value, rec.reason)
                return None
            if rec.kv_tokens:  # what the engine allocated, in place of the estimate
                cand = dataclasses.replace(cand, gpu_kv_tokens=rec.kv_tokens)
            arrays = read_request_timings(rec.requests_path)
            return MeasuredTrial(cand, RequestTimes.passes_from_arrays(arrays, len(setup.workload)))

        shape = workload_shape(setup.workload, model_dir, speed=args.speed)
        result, model = run_grid(grid_of(space), candidate, measure, shape, args.seed, args.baseline)
    base, size = result["rows"][0]["measured"], kv_bytes_of(space, args.baseline)
    if base and base["kv_tokens"] and size:  # what the baseline's engine allocated for its configured size
        tokens = int(base["kv_tokens"])
        defaults = dataclasses.replace(defaults, kv_tokens=tokens, kv_bytes_per_token=size // tokens)
    return result, model, defaults, "fake server (tests/fakes)" if args.quick else c.environment()["engine"]


def _engine_defaults(setup: Any, args: Any) -> EngineDefaults:
    """Another engine's defaults (``--engine-defaults SEQS,TOKENS``: vLLM's max-num-seqs and
    max-num-batched-tokens there), its KV tokens, block and bytes per token from the memory estimate of
    the baseline's command."""
    seqs, tokens = (int(x) for x in args.engine_defaults.split(","))
    est = setup.guard.check(setup.sizing()).estimate
    if est is None:
        raise SystemExit("the memory estimate knows no KV size for the baseline: the model's config.json?")
    return EngineDefaults(
        kv_tokens=est.kv_tokens, kv_bytes_per_token=est.kv_bytes_per_token, block_size=est.block_size,
        batched_tokens=tokens, max_seqs=seqs,
    )  # fmt: skip


# -- the dry run: a fake engine of known cost ----------------------------------------------------------
def _dry(args: Any, model_dir: str) -> tuple[dict[str, Any], LatencyModel, EngineDefaults, str]:
    space = load_search_space(SPACE)
    shape = workload_shape(load_workload(WORKLOAD), model_dir, speed=args.speed)
    rng = np.random.default_rng(args.seed)

    def candidate(values: Mapping[str, Any]) -> Candidate:
        return candidate_of(space, values, CPU_DEFAULTS)

    def measure(values: Mapping[str, Any], cand: Candidate) -> MeasuredTrial | None:
        sim = simulate(shape.arrivals, shape.outputs, LatencyModel(shape).cache(cand), DRY_COSTS, cand.limits)
        jitter = 1 + 0.05 * rng.standard_normal(len(shape.ids))
        ttft = sim.ttft * jitter
        latency = ttft + np.nan_to_num(sim.tpot) * (shape.outputs - 1) * jitter
        return MeasuredTrial(
            cand, (RequestTimes(shape.arrivals.copy(), ttft, latency, shape.outputs.copy()),)
        )

    result, model = run_grid(grid_of(space), candidate, measure, shape, args.seed)
    return result, model, CPU_DEFAULTS, "dry run: a simulated engine"


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="no engine: measurements simulated at known costs")
    p.add_argument("--seed", type=int, default=0, help="order of the 11 configurations after the baseline")
    p.add_argument(
        "--speed", type=float, default=None, help="replay speed (default: the demo's 1; --quick: 8)"
    )
    p.add_argument(
        "--calibration-out", type=Path, default=None, help="the calibration file (default: beside the JSON)"
    )
    p.add_argument("--model", help="the model's directory (default: the CPU build's tiny bench model)")
    p.add_argument(
        "--workload", type=Path, default=WORKLOAD, help="the workload (default examples/rag.jsonl)"
    )
    p.add_argument(
        "--space", type=Path, default=SPACE, help="the grid, as a search space (default: the demo's)"
    )
    p.add_argument(
        "--baseline",
        type=json.loads,
        default=BASELINE,
        help="the grid's baseline point, JSON (default: the demo's)",
    )
    p.add_argument(
        "--engine-arg", dest="fixed", action="append", help="fixed flags (default: the CPU build's)"
    )
    p.add_argument(
        "--baseline-arg", dest="baseline_args", action="append", help="the baseline's flags ('none': none)"
    )
    p.add_argument(
        "--profile", default="cpu", help="engine profile (default cpu; the GPU script: cuda-native)"
    )
    p.add_argument("--launcher", help="command that starts the server (default: vLLM's)")
    p.add_argument("--startup-timeout", type=int, default=300, help="seconds an engine may take to start")
    p.add_argument(
        "--engine-defaults", help="SEQS,TOKENS: another engine's max-num-seqs and max-num-batched-tokens"
    )
    args = p.parse_args(argv)
    if args.baseline_args == ["none"]:
        args.baseline_args = []
    c.setup_logging(args.verbose)
    args.speed = args.speed or (8.0 if args.quick else 1.0)
    if args.json_out is None and not (args.dry_run or args.quick):
        args.json_out = DEFAULT_JSON
    # the dry run cuts prompts with the bench model's tokenizer when it was generated, else in words
    model_dir = args.model or (
        c.bench_model(args.models_dir)
        if not args.dry_run
        else str(args.models_dir / f"tiny-l{c.BENCH_LAYERS}")
    )
    load_start = c.load_average()
    t0 = time.monotonic()
    result, model, defaults, engine = (_dry if args.dry_run else _real)(args, model_dir)
    assert model.costs is not None
    cal = Calibration(
        machine=this_machine(), model=Path(model_dir).name, engine=engine, costs=model.costs,
        errors=tuple(model.ledger.errors), defaults=defaults, space=str(args.space),
    )  # fmt: skip
    cal_path = args.calibration_out or (
        args.json_out.with_suffix(".calibration.json") if args.json_out else None
    )
    if cal_path is not None:
        cal.save(cal_path)
    payload = {
        "benchmark": "predict_grid", "env": c.environment(), "dry_run": args.dry_run, "model": model_dir,
        "workload": str(args.workload), "quick": args.quick, "space": str(args.space),
        "baseline": args.baseline, "fixed_args": args.fixed or list(c.fixed_args(quick=args.quick)), "seed": args.seed, "speed": args.speed,
        "calibration": str(cal_path) if cal_path else None, "wall_s": time.monotonic() - t0,
        "load_average": {"start": load_start, "end": c.load_average()}, **result,
    }  # fmt: skip
    c.write_json(args.json_out, payload)
    print(markdown(payload))
    return 0


def markdown(r: Mapping[str, Any]) -> str:
    rows = []
    for row in r["rows"]:
        m, pr, fb = row["measured"], row["predicted"], r["from_baseline"].get(row["key"])
        rows.append([
            row["order"], row["key"], "-" if m is None else f"{m['ttft_p90_ms']:.1f}",
            "-" if fb is None else f"{fb['ttft_p90_ms']:.1f}",
            "-" if pr is None else f"{pr['ttft_p90_ms']:.1f} [{pr['interval_ms'][0]:.0f}-{pr['interval_ms'][1]:.0f}]",
            "-" if "inside" not in row else ("yes" if row["inside"] else "no"),
        ])  # fmt: skip
    v = r["verdict"]
    fb, go = v["from_baseline"], v["as_it_goes"]
    return "\n".join([
        c.md_header("Predicted next to measured (predict_grid.py)" + (" — DRY RUN" if r["dry_run"] else ""), r["env"], r["load_average"]),
        c.md_table(["#", "configuration", "measured p90 ms", "predicted from baseline", "predicted before launch [interval]", "inside"], rows),
        f"\nFrom the baseline alone: {fb['within_20']} of {fb['of']} within 20%; best {fb.get('best')} in the top 3: "
        f"{fb['best_in_top3']} (the model's first pick measured {fb.get('top1_regret', float('nan')):+.1%} against the best).",
        f"As it goes: {go['within_20']} of {go['of']} within 20%; best in the top 3: {go['best_in_top3']}; {v['ledger']}.",
        f"Done when: {v['done_when']}",
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
