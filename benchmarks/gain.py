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

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c

from autotune.bench import ArrivalSpec
from autotune.export import export_best
from autotune.outcome import TrialOutcome, TrialStatus
from autotune.space import RenderedConfig, load_search_space
from autotune.study import Objective, TrialReport, load_or_create, run_study
from autotune.trial import VllmEvaluator

WORKLOADS = ("rag.jsonl", "support_chat.jsonl")
# (figure, label, higher is better)
ROWS: tuple[tuple[str, str, bool], ...] = (
    ("ttft_p50", "TTFT p50 (ms)", False),
    ("ttft_p90", "TTFT p90 (ms)", False),
    ("tpot_p50", "TPOT p50 (ms)", False),
    ("output_throughput", "output tokens/s", True),
    ("goodput", "goodput (req/s within SLO)", True),
)


def _figures(outcome: TrialOutcome) -> dict[str, float] | None:
    if outcome.status != TrialStatus.OK or outcome.figures is None:
        return None
    f = outcome.figures
    out = {name: f.metric(name) for name, _, _ in ROWS if name != "goodput"}
    out["goodput"] = f.goodput if f.goodput is not None else float("nan")
    out["failed"] = float(f.failed)
    out["prefix_hit_rate"] = (
        outcome.metrics.prefix_hit_rate
        if outcome.metrics and outcome.metrics.prefix_hit_rate is not None
        else float("nan")
    )
    out["preemptions"] = outcome.metrics.preemptions if outcome.metrics else float("nan")
    return out


def _tune(
    name: str, evaluator: VllmEvaluator, n_trials: int, seed: int, db: Path
) -> tuple[Any, list[dict[str, Any]], float]:
    space = load_search_space(c.REPO / "search_spaces" / "cpu.yaml")
    objective = Objective(metric="ttft_p90", min_throughput_ratio=0.95)
    study = load_or_create(f"sqlite:///{db}", name, objective, seed)
    trials: list[dict[str, Any]] = []

    def done(rep: TrialReport) -> None:
        rec = rep.record
        f = rec.get("figures") or {}
        row = {
            "number": rep.number,
            "baseline": rep.baseline,
            "params": dict(rep.params),
            "status": rec.get("status"),
            "failure": rec.get("failure"),
            "ttft_p90": (f.get("percentiles_ms") or {}).get("ttft_p90"),
            "output_throughput": f.get("output_throughput"),
            "feasible": rep.feasible,
            "timings_s": rec.get("timings_s"),
        }
        trials.append(row)
        c.log.info(
            "%s trial %d %s %s ttft_p90=%s failure=%s",
            name,
            rep.number,
            "baseline" if rep.baseline else dict(rep.params),
            rec.get("status"),
            row["ttft_p90"],
            rec.get("failure"),
        )

    t0 = time.monotonic()
    run_study(
        study=study,
        space=space,
        evaluator=evaluator,
        objective=objective,
        n_trials=n_trials,
        on_trial_done=done,
    )
    return study, trials, time.monotonic() - t0


def _alternate(
    evaluator: VllmEvaluator, configs: Mapping[str, RenderedConfig], rounds: int
) -> dict[str, list[dict[str, float] | None]]:
    """A B A B ...: each configuration measured ``rounds`` times on a fresh engine, interleaved."""
    runs: dict[str, list[dict[str, float] | None]] = {k: [] for k in configs}
    n = 9000
    for r in range(rounds):
        for label, cfg in configs.items():
            outcome = evaluator(n, cfg)
            n += 1
            figs = _figures(outcome)
            runs[label].append(figs)
            c.log.info(
                "round %d %s: %s",
                r + 1,
                label,
                {k: round(v, 2) for k, v in figs.items()} if figs else outcome.failure,
            )
    return runs


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
    wl = c.example_workload(wl_name, quick=args.quick)
    arrival = ArrivalSpec(mode="timestamps", speed=args.speed)
    spec = c.launch_spec(model, quick=args.quick)
    stem = Path(wl_name).stem
    work = args.work_dir / f"gain-{stem}-{stamp}"
    evaluator = VllmEvaluator(
        spec=spec, workload=wl, arrival=arrival, log_dir=work / "logs", slos_ms=dict(slos_ms)
    )
    work.mkdir(parents=True, exist_ok=True)
    load_start = c.load_average()
    study, trials, tune_s = _tune(f"gain-{stem}", evaluator, args.trials, args.seed, work / "study.db")
    fixed_argv = list(c.QUICK_FIXED_ARGS if args.quick else c.FIXED_ARGS)
    best, exported = export_best(study, model=model, fixed_argv=fixed_argv, out=work / "best.yaml")
    tuned = RenderedConfig(
        args=tuple(best.user_attrs.get("rendered_args") or ()),
        env=dict(best.user_attrs.get("rendered_env") or {}),
    )
    configs = {"defaults": RenderedConfig(args=()), "tuned": tuned}
    t0 = time.monotonic()
    runs = _alternate(evaluator, configs, args.rounds)
    ab_s = time.monotonic() - t0
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
            "best_is_baseline": bool(best.user_attrs.get("baseline")),
            "best_params": dict(best.params),
            "best_flags": list(tuned.args),
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
            f"#{s['best_trial']} of {s['n_trials']} ({s['failed_trials']} failed to start), flags "
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
    model = c.bench_model(args.models_dir, quick=args.quick)
    slos = {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    t0 = time.monotonic()
    results = [bench_workload(w, args, model, slos, stamp) for w in args.workloads.split(",")]
    result = {
        "benchmark": "gain",
        "quick": args.quick,
        "env": env,
        "model": model,
        "fixed_args": list(c.QUICK_FIXED_ARGS if args.quick else c.FIXED_ARGS),
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
