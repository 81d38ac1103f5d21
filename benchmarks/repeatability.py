"""Repeatability: the coefficient of variation of the objective (TTFT p90) over repeated measurements
of one configuration, each on a freshly started engine exactly as a study measures a trial (the
evaluator of ``autotune.tuning.build_setup``: start, 2 warm-up requests, the whole workload at its
file timestamps, stop).

Target: CV <= 3%. When it is missed, the measurement length that would meet it is estimated under
the assumption that the noise is sampling noise (CV proportional to 1/sqrt(requests measured)):
length x (CV / 3%)^2. Restart-to-restart differences that do not shrink with length would make
this an underestimate.

    python benchmarks/repeatability.py             # 5 starts on the CPU build, about 4 min
    python benchmarks/repeatability.py --quick     # fake server, 3 runs
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import _common as c

from autotune.space import EngineConfig
from autotune.study import TrialRecord
from autotune.tuning import build_setup

TARGET_CV = 0.03
FIGURES = ("ttft_p90", "ttft_p50", "tpot_p50", "output_throughput")


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, help="measurements (default 5; quick 3)")
    p.add_argument(
        "--args",
        default="",
        help="tuned flags of the configuration measured, e.g. '--block-size 32' (default: none, i.e. "
        "vLLM's defaults with the fixed flags: a study's trial 0)",
    )
    p.add_argument("--workload", default="rag.jsonl", help="file in examples/ (default rag.jsonl)")
    p.add_argument("--speed", type=float, help="replay speed-up (default 1: the default length; quick 20)")
    args = p.parse_args(argv)
    args.runs = args.runs or (3 if args.quick else 5)
    args.speed = args.speed or (20.0 if args.quick else 1.0)
    c.setup_logging(args.verbose)
    env = c.environment()
    model = c.bench_model(args.models_dir)
    work = args.work_dir / f"repeatability-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload(args.workload, quick=args.quick, work_dir=work)
    choices = c.tuning_choices(model, wl_path, quick=args.quick, speed=args.speed)
    rendered = EngineConfig.recorded(shlex.split(args.args))
    load_start = c.load_average()
    t0 = time.monotonic()
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        evaluator = setup.evaluator(work)
        runs = [_run(i, evaluator(i, rendered)) for i in range(args.runs)]
        wl, arrival = setup.workload, setup.arrival
    wall = time.monotonic() - t0
    ok = [r for r in runs if r["status"] == "ok"]
    stats = {name: c.spread(r[name] for r in ok) for name in FIGURES}
    cv = stats["ttft_p90"].get("cv")
    duration = c.spread(r["duration_s"] for r in ok).get("mean")
    factor = (cv / TARGET_CV) ** 2 if cv is not None and cv > TARGET_CV else 1.0
    result = {
        "benchmark": "repeatability",
        "quick": args.quick,
        "env": env,
        "model": model,
        "fixed_args": list(c.fixed_args(quick=args.quick)),
        "config_args": list(rendered.flags),
        "workload": f"examples/{args.workload}",
        "requests": len(wl),
        "arrival": arrival.describe(),
        "runs": runs,
        "stats": stats,
        "cv_ttft_p90": cv,
        "target_cv": TARGET_CV,
        "meets_target": cv is not None and cv <= TARGET_CV,
        "measure_s_mean": duration,
        "length_factor_for_target": factor,
        "estimated_requests_for_target": len(wl) * factor,
        "estimated_measure_s_for_target": duration * factor if duration else None,
        "load_average": {"start": load_start, "end": c.load_average()},
        "wall_s": wall,
    }
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(f"\nwall time: {wall:.0f} s", file=sys.stderr)
    return 0


def _run(i: int, record: TrialRecord) -> dict[str, Any]:
    if not record.ok or record.figures is None:
        return {"status": record.status.value, "failure": record.failure, "reason": record.reason}
    f = record.figures
    c.log.info("run %d: ttft_p90 %.1f ms", i + 1, f.metric("ttft_p90"))
    return {
        "status": record.status.value,
        **{name: f.metric(name) for name in FIGURES},
        "duration_s": f.metric("duration_s"),
        "completed": f.completed,
        "failed": f.failed,
        "timings_s": dict(record.timings_s),
    }


def markdown(r: Mapping[str, Any]) -> str:
    parts = [c.md_header("Repeatability (repeatability.py)", r["env"], r["load_average"])]
    cfg = " ".join(r["config_args"]) or "vLLM's defaults"
    parts.append(
        f"{len(r['runs'])} measurements of one configuration ({cfg}; fixed `{' '.join(r['fixed_args'])}`), "
        f"each on a fresh engine as in a study; {r['workload']} ({r['requests']} requests, {r['arrival']}, "
        f"about {r['measure_s_mean'] or 0:.1f} s measured per run).\n"
    )
    rows = [
        [
            name,
            c.fmt_spread(s, 2),
            f"{s['stdev']:.2f}" if s.get("n") else "-",
            f"{s['cv']:.1%}" if s.get("n") else "-",
        ]
        for name, s in r["stats"].items()
    ]
    parts.append(c.md_table(["figure", "mean (min-max)", "stdev", "CV"], rows))
    cv = r["cv_ttft_p90"]
    if cv is None:
        parts.append("\nno successful measurement")
    elif r["meets_target"]:
        parts.append(f"\nCV of TTFT p90: {cv:.1%} <= {r['target_cv']:.0%}: target met.")
    else:
        parts.append(
            f"\nCV of TTFT p90: {cv:.1%}, target {r['target_cv']:.0%} missed by {cv / r['target_cv']:.1f}x. "
            f"If the noise is sampling noise (CV ~ 1/sqrt(requests)), about {r['length_factor_for_target']:.0f}x "
            f"the length would meet it: ~{r['estimated_requests_for_target']:.0f} requests, "
            f"~{r['estimated_measure_s_for_target'] or 0:.0f} s of measurement per trial."
        )
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
