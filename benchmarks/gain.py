"""Gain over vLLM's defaults: tune each shipped example workload, then measure the defaults (A)
and the exported best configuration (B) alternately, A B A B ..., in the same run.

Real runs use the CPU build of vLLM with the bench model (see ``_common.py``) and the fixed flags
``--enforce-eager --max-model-len=2048 --kv-cache-memory-bytes=20M``: a KV pool of 2,560 tokens,
scarce for the prefix-heavy examples; the search space (search_spaces/cpu.yaml) may raise it.
The workloads are replayed at ``--speed`` times their timestamps (default 3: the RAG example at
about 9 requests/s), so that the server is busy enough for its configuration to matter.

    python benchmarks/gain.py                      # about 13 min on 2 cores
    python benchmarks/gain.py --quick              # fake server, seconds
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import optuna

from autotune.export import export_best
from autotune.study import (
    TrialHooks,
    TrialPolicy,
    TrialRecord,
    TrialReport,
    baseline_trial,
    ensure_baseline,
    load_or_create,
    read_record,
    run_study,
)
from autotune.trial import VllmEvaluator, compare_configs
from autotune.tuning import TuningSetup, build_setup, plan_baseline

WORKLOADS = ("rag.jsonl", "support_chat.jsonl")
# (figure, label, higher is better)
ROWS: tuple[tuple[str, str, bool], ...] = (
    ("ttft_p50", "TTFT p50 (ms)", False),
    ("ttft_p90", "TTFT p90 (ms)", False),
    ("tpot_p50", "TPOT p50 (ms)", False),
    ("output_throughput", "output tokens/s", True),
    ("goodput", "goodput (req/s within SLO)", True),
)


def _value(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _figures(record: TrialRecord) -> dict[str, float] | None:
    if not record.ok or record.figures is None:
        return None
    out = {name: _value(record.metric(name)) for name, _, _ in ROWS}
    out["failed"] = float(record.figures.failed)
    out["prefix_hit_rate"] = _value(record.metrics.prefix_hit_rate if record.metrics else None)
    out["preemptions"] = _value(record.metric("preemptions"))
    return out


def _tune(
    name: str, setup: TuningSetup, evaluator: VllmEvaluator, n_trials: int, seed: int, db: Path
) -> tuple[optuna.Study, list[dict[str, Any]], float]:
    """A study as ``autotune run`` runs it (the baseline, or its runnable reference, first). The
    goodput SLOs are a reported figure here, not constraints of the study: the defaults' TTFT p90
    on this machine is far above them, and the study would then have no feasible baseline."""
    objective = dataclasses.replace(setup.objective, slos_ms={})
    study = load_or_create(f"sqlite:///{db}", name, objective, seed)
    plan = plan_baseline(setup)
    ensure_baseline(study, dict(plan.reference) if plan.reference is not None else None)
    trials: list[dict[str, Any]] = []

    def done(rep: TrialReport) -> None:
        rec = rep.record
        row = {
            "number": rep.number,
            "baseline": rec.baseline,
            "params": dict(rep.params),
            "status": rec.status.value,
            "failure": rec.failure,
            "ttft_p90": rec.metric("ttft_p90"),
            "output_throughput": rec.metric("output_throughput"),
            "feasible": rep.feasible,
            "timings_s": dict(rec.timings_s),
        }
        trials.append(row)
        c.log.info(
            "%s trial %d %s %s ttft_p90=%s failure=%s",
            name,
            rep.number,
            "baseline" if rec.baseline else dict(rep.params),
            rec.status.value,
            row["ttft_p90"],
            rec.failure,
        )

    t0 = time.monotonic()
    setup.check_fixed_flags()
    run_study(
        study,
        TrialPolicy(space=setup.space, objective=objective),
        evaluator,
        n_trials,
        TrialHooks(on_done=done),
    )
    return study, trials, time.monotonic() - t0


def _alternate(
    evaluator: VllmEvaluator, arms: Sequence[tuple[str, Sequence[str]]], rounds: int
) -> dict[str, list[dict[str, float] | None]]:
    """A B A B ...: each configuration measured ``rounds`` times on a fresh engine, interleaved
    (``compare_configs``, as ``autotune compare`` and the confirmation rounds measure)."""

    def on_run(label: str, r: int, record: TrialRecord) -> None:
        figs = _figures(record)
        shown = {k: round(v, 2) for k, v in figs.items()} if figs else record.failure
        c.log.info("round %d %s: %s", r + 1, label, shown)

    result = compare_configs(evaluator, arms, rounds=rounds, on_run=on_run)
    return {arm.name: [_figures(rec) for rec in arm.runs] for arm in (result.a, result.b)}


def _summary(runs: Sequence[dict[str, float] | None]) -> dict[str, Any]:
    ok = [r for r in runs if r is not None]
    keys = [name for name, _, _ in ROWS] + ["failed", "prefix_hit_rate", "preemptions"]
    return {"runs_ok": len(ok), "runs": len(runs), **{k: c.spread(r[k] for r in ok) for k in keys}}


def _ratio(a: Mapping[str, Any], b: Mapping[str, Any], higher_better: bool) -> float | None:
    """How many times better B is than A (> 1: better), from the means."""
    if not a.get("n") or not b.get("n") or not a["mean"] or not b["mean"]:
        return None
    return float(b["mean"] / a["mean"] if higher_better else a["mean"] / b["mean"])


def _verdict(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """B against A on a latency: ``better``/``worse`` when their min-max ranges do not overlap."""
    if not a.get("n") or not b.get("n"):
        return "not measured"
    if b["max"] < a["min"]:
        return "better"
    if b["min"] > a["max"]:
        return "worse"
    return "within noise (ranges overlap)"


def bench_workload(
    wl_name: str, args: Any, model: str, slos_ms: Mapping[str, float], stamp: str
) -> dict[str, Any]:
    stem = Path(wl_name).stem
    work = args.work_dir / f"gain-{stem}-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload(wl_name, quick=args.quick, work_dir=work)
    slos = [f"ttft_p90={slos_ms['ttft']:g}ms", f"tpot_p90={slos_ms['tpot']:g}ms"]  # goodput's limits
    choices = c.tuning_choices(model, wl_path, quick=args.quick, speed=args.speed, slos=slos)
    with build_setup(choices) as setup:
        load_start = c.load_average()
        study, trials, tune_s = _tune(
            f"gain-{stem}", setup, setup.evaluator(work / "logs"), args.trials, args.seed, work / "study.db"
        )
        best, exported = export_best(study, out=work / "best.yaml")
        best_rec = read_record(best)
        base = baseline_trial(study)  # vLLM's defaults, or the runnable reference measured instead
        base_args = read_record(base).rendered_args if base is not None else ()
        arms = [("defaults", list(base_args)), ("tuned", list(best_rec.rendered_args))]
        t0 = time.monotonic()
        # The study's evaluator, logging apart; the flags were checked by vLLM's parser in the study.
        runs = _alternate(setup.evaluator(work / "ab", check_args=False), arms, args.rounds)
        ab_s = time.monotonic() - t0
        wl, arrival = setup.workload, setup.arrival
    summary = {k: _summary(v) for k, v in runs.items()}
    ratios = {name: _ratio(summary["defaults"][name], summary["tuned"][name], hb) for name, _, hb in ROWS}
    d, t = summary["defaults"], summary["tuned"]
    verdict = _verdict(d["ttft_p90"], t["ttft_p90"])
    never_worse = bool(
        t["runs_ok"] == t["runs"]
        and verdict != "worse"
        and t["output_throughput"]["mean"] >= 0.95 * d["output_throughput"]["mean"]
    )
    return {
        "workload": str(c.EXAMPLES / wl_name),
        "requests": len(wl),
        "arrival": arrival.describe(),
        "study": {
            "trials": trials,
            "n_trials": len(trials),
            "failed_trials": sum(1 for tr in trials if tr["status"] != "ok"),
            "best_trial": best.number,
            "best_is_baseline": best_rec.baseline,
            "best_params": dict(best.params),
            "best_flags": list(best_rec.rendered_args),
            "exported_command": exported.command,
            "wall_s": tune_s,
        },
        "alternating": {"rounds": args.rounds, "wall_s": ab_s, "defaults": d, "tuned": t},
        "ratio_tuned_vs_defaults": ratios,
        "ttft_p90_verdict": verdict,
        "never_worse_than_defaults": never_worse,
        "load_average": {"start": load_start, "end": c.load_average()},
    }


def markdown(result: Mapping[str, Any]) -> str:
    load = {
        "start": result["workloads"][0]["load_average"]["start"],
        "end": result["workloads"][-1]["load_average"]["end"],
    }
    parts = [c.md_header("Gain over vLLM's defaults (gain.py)", result["env"], load)]
    slo = result["slo_ms"]
    parts.append(
        f"SLO for goodput: TTFT <= {slo['ttft']:g} ms and TPOT <= {slo['tpot']:g} ms per request. "
        f"Study: {result['trials']} trials (the baseline included), objective TTFT p90, output "
        f"throughput >= 0.95 x baseline; then defaults (A) and the exported best (B) measured "
        f"alternately, {result['rounds']} rounds each, a fresh engine per run. Mean (min-max) over "
        f"rounds; ratio = how many times better B is (from the means).\n"
    )
    for w in result["workloads"]:
        s = w["study"]
        d = w["alternating"]["defaults"]
        t = w["alternating"]["tuned"]
        parts.append(
            f"**{Path(w['workload']).name}** ({w['requests']} requests, {w['arrival']}): best trial "
            f"#{s['best_trial']} of {s['n_trials']} ({s['failed_trials']} not measured: failed to start or rejected before launch), flags "
            f"`{' '.join(s['best_flags']) or '(defaults)'}`; study {s['wall_s']:.0f} s, A/B "
            f"{w['alternating']['wall_s']:.0f} s; load average {w['load_average']['start']} -> "
            f"{w['load_average']['end']}\n"
        )
        rows = []
        for name, label, _ in ROWS:
            r = w["ratio_tuned_vs_defaults"][name]
            rows.append(
                [label, c.fmt_spread(d[name], 2), c.fmt_spread(t[name], 2), f"{r:.2f}x" if r else "-"]
            )
        rows.append(
            [
                "prefix-cache hit rate",
                c.fmt_spread(d["prefix_hit_rate"], 2),
                c.fmt_spread(t["prefix_hit_rate"], 2),
                "",
            ]
        )
        rows.append(["preemptions", c.fmt_spread(d["preemptions"], 0), c.fmt_spread(t["preemptions"], 0), ""])
        rows.append(["failed requests", c.fmt_spread(d["failed"], 0), c.fmt_spread(t["failed"], 0), ""])
        parts.append(c.md_table(["figure", "defaults (A)", "tuned (B)", "B vs A"], rows))
        same = " (the study kept the defaults: B = A)" if s["best_is_baseline"] else ""
        parts.append(
            f"\nTTFT p90 of B vs A: {w['ttft_p90_verdict']}{same}; never worse than defaults (p90 not "
            f"worse beyond the spread, throughput >= 0.95 x): {'yes' if w['never_worse_than_defaults'] else 'NO'}\n"
        )
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, help="study budget, the baseline included (default 6; quick 3)")
    p.add_argument("--rounds", type=int, help="A/B rounds (default 3; quick 2)")
    p.add_argument("--speed", type=float, help="replay speed-up of the timestamps (default 3; quick 20)")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated files in examples/")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slo-ttft-ms", type=float, default=200.0)
    p.add_argument("--slo-tpot-ms", type=float, default=50.0)
    args = p.parse_args(argv)
    args.trials = args.trials or (3 if args.quick else 6)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.speed = args.speed or (20.0 if args.quick else 3.0)
    c.setup_logging(args.verbose)
    env = c.environment()
    model = c.bench_model(args.models_dir)
    slos = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    t0 = time.monotonic()
    results = [bench_workload(w, args, model, slos, stamp) for w in args.workloads.split(",")]
    result = {
        "benchmark": "gain",
        "quick": args.quick,
        "env": env,
        "model": model,
        "fixed_args": list(c.fixed_args(quick=args.quick)),
        "trials": args.trials,
        "rounds": args.rounds,
        "speed": args.speed,
        "slo_ms": slos,
        "workloads": results,
        "wall_s": time.monotonic() - t0,
    }
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(f"\nwall time: {result['wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
