"""Issue 14 on the CPU build: what the prior, the repeated passes and the pruner buy per engine start.

Every measurement goes through the tool's own evaluator (``build_setup(...).evaluator``), exactly as
a study trial measures: one fresh vLLM engine per configuration, warm-up, then ``--passes`` replays
with the prefix cache emptied between them (``POST /reset_prefix_cache``). The per-request timings
of every pass are kept (the evaluator's ``trial-NNNN.requests.npz``, passes in order, requests in
completion order), so the pruner can be judged offline on real measurements.

    python benchmarks/search_learning.py grid --workload examples/rag.jsonl --speed 3 --out G1.json
    python benchmarks/search_learning.py grid --workload W.jsonl --speed 1 --out G2.json
    python benchmarks/search_learning.py repeat --restarts 6 --out R.json
    python benchmarks/search_learning.py report G1.json G2.json R.json
    python benchmarks/search_learning.py machine --probes 20 --out M.json

``grid``: every configuration of benchmarks/data/grid_space.yaml (18), once each, with 3 passes.
``repeat``: the study's baseline (vLLM's defaults with the fixed flags) on ``--restarts`` fresh
engines with auto passes: the CV over restarts of the first pass alone (a one-pass trial), of the
trial's figure (the median of the passes' p90s), and of an alternative, the p90 over every pass's
requests together (both recomputed from the kept timings), and the trial time against a one-pass
trial. ``--warmup alternate`` alternates the tool's workload-shaped warm-up with the short unrelated
one restart by restart, and ``report`` compares each pair of neighbours; ``--alternate-env
NAME=VALUE`` does the same for one variable of the engines' environment. Before each restart the
machine's own speed is timed (``--machine-probe-s``, a fixed pure-Python unit of work), so that an
engine's level can be told from the machine's.
``machine``: that probe alone, back to back on the idle machine: the floor under any CV series.
``report``: (1) the prior's first informed candidate against the median configuration of the grid
(the expected random trial); (2) the pruner replayed on the measured passes, over many trial orders:
replay time saved, and whether it ever pruned the configuration that is best without it; (3) the
CV table. No engine runs in ``report``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import numpy as np
import optuna
from search_efficiency import grid_points as _grid_points
from search_efficiency import key as _key

from autotune.space import EngineConfig, load_search_space
from autotune.study import Figures, IncumbentPruner, TrialRecord, TrialStatus, write_record
from autotune.trial import read_request_timings
from autotune.tuning import build_setup

SPACE_PATH = c.REPO / "benchmarks" / "data" / "grid_space.yaml"
CHECKPOINTS = 4


def _pass_ttfts(npz: str, n: int, passes: int) -> list[list[float]]:
    """TTFT (ms, NaN for failures) of each pass, requests in completion order."""
    data = read_request_timings(npz)
    ttft = np.where(data["ok"], data["ttft"] * 1000.0, np.nan) if data else np.array([])
    return [ttft[k * n : (k + 1) * n].tolist() for k in range(passes)]


def _record_entry(rec: TrialRecord, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"status": rec.status.value, "failure": rec.failure, "reason": rec.reason}
    if rec.ok and rec.figures is not None:
        out.update(
            ttft_p90=rec.figures.get("ttft_p90"),
            passes=[dict(p) for p in rec.passes],
            notes=list(rec.notes),
            predicted=dict(rec.predicted),
            prefix_hit_rate=rec.metrics.prefix_hit_rate if rec.metrics else None,
            timings_s=dict(rec.timings_s),
            pass_ttft_ms=_pass_ttfts(rec.requests_path or "", n, len(rec.passes)),
        )
    return out


def cmd_grid(args: argparse.Namespace) -> dict[str, Any]:
    model = c.bench_model(args.models_dir)
    choices = c.tuning_choices(model, args.workload, quick=False, speed=args.speed, space=SPACE_PATH)
    choices = choices.model_copy(update={"passes": str(args.passes)})
    env, load0, t0 = c.environment(), c.load_average(), time.monotonic()
    log_dir = args.work_dir / f"learning-grid-{time.strftime('%Y%m%d-%H%M%S')}"
    table: dict[str, Any] = {}
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        prior = setup.with_prior().prior
        assert prior is not None
        space = load_search_space(SPACE_PATH)  # the whole grid, whatever the prior would drop
        evaluator = setup.evaluator(log_dir)
        points = _grid_points(space)
        random.Random(args.seed).shuffle(points)
        for i, values in enumerate(points):
            rec = evaluator(i, EngineConfig.chosen(space, values))
            entry = {"values": values, "order": i, **_record_entry(rec, len(setup.workload))}
            entry["predicted"] = prior.predict(values)
            table[_key(values)] = entry
            c.log.warning("grid %d/%d %s: %s p90 %s", i + 1, len(points), values, rec.status.value,
                          entry.get("ttft_p90"))  # fmt: skip
        return {
            "benchmark": "search_learning/grid",
            "env": env,
            "workload": str(args.workload),
            "requests": len(setup.workload),
            "arrival": setup.arrival.describe(),
            "fixed_args": list(c.fixed_args(quick=False)),
            "passes": args.passes,
            "prior": {"lines": prior.lines, "candidates": prior.candidates},
            "baseline": _key({"kv_cache_memory_bytes": 20, "block_size": 128, "enable_prefix_caching": True}),
            "configs": table,
            "load_average": {"start": load0, "end": c.load_average()},
            "wall_s": time.monotonic() - t0,
        }


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def cmd_repeat(args: argparse.Namespace) -> dict[str, Any]:
    if args.alternate_env and "=" not in args.alternate_env:  # before anything starts
        raise SystemExit(f"--alternate-env: {args.alternate_env!r} is not NAME=VALUE")
    model = c.bench_model(args.models_dir)
    choices = c.tuning_choices(model, args.workload, quick=False, speed=args.speed, space=SPACE_PATH)

    choices = choices.model_copy(update={"passes": "auto"})
    env, load0, t0 = c.environment(), c.load_average(), time.monotonic()
    log_dir = args.work_dir / f"learning-repeat-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = []
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        evaluator = setup.evaluator(log_dir)
        name, _, value = (args.alternate_env or "").partition("=")
        kept = os.environ.get(name) if name else None
        for i in range(args.restarts):
            warmup = args.warmup if args.warmup != "alternate" else ("short", "like")[i % 2]
            evaluator.warmup_like_workload = warmup == "like"
            arm = args.alternate_env if name and i % 2 else ""
            if name:  # the engine inherits the tool's environment (LaunchSpec.process_env)
                _set_env(name, value if arm else kept)
            machine_ms = c.machine_speed(args.machine_probe_s)  # before the engine starts: quiet
            t = time.monotonic()
            rec = evaluator(i, EngineConfig())
            entry = _record_entry(rec, len(setup.workload))
            entry["wall_s"] = time.monotonic() - t
            entry["warmup"] = warmup
            entry["machine_ms"] = machine_ms
            if name:
                entry["env_arm"] = arm
            runs.append(entry)
            c.log.warning("restart %d%s: p90 %s passes %s", i, f" ({arm})" if arm else "", entry.get("ttft_p90"),
                          [p.get("ttft_p90") for p in entry.get("passes", [])])  # fmt: skip
        if name:
            _set_env(name, kept)
        return {
            "benchmark": "search_learning/repeat",
            "env": env,
            "workload": str(args.workload),
            "requests": len(setup.workload),
            "arrival": setup.arrival.describe(),
            "runs": runs,
            "load_average": {"start": load0, "end": c.load_average()},
            "wall_s": time.monotonic() - t0,
        }


def cmd_machine(args: argparse.Namespace) -> dict[str, Any]:
    """The floor under any CV series on this machine: the same probe ``repeat`` times before each
    restart, back to back on the idle machine."""
    env, load0 = c.environment(), c.load_average()
    probes = [c.machine_speed(args.machine_probe_s) for _ in range(args.probes)]
    xs = [x for x in probes if x is not None]
    print(
        f"machine speed, {len(xs)} probes of {args.machine_probe_s:g} s (ms per unit): "
        + ", ".join(f"{x:.2f}" for x in xs)
        + (f"; CV {_cv(xs):.1%}, max/min {max(xs) / min(xs):.2f}" if len(xs) > 1 else "")
    )
    return {
        "benchmark": "search_learning/machine",
        "env": env,
        "probe_s": args.machine_probe_s,
        "machine_ms": xs,
        "cv_machine": _cv(xs) if len(xs) > 1 else None,
        "load_average": {"start": load0, "end": c.load_average()},
    }


# -- report (no engine) --------------------------------------------------------------------------
def _cv(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")


def prior_vs_random(grid: Mapping[str, Any]) -> dict[str, Any]:
    ok = {k: e for k, e in grid["configs"].items() if e["status"] == "ok" and e.get("ttft_p90") is not None}
    values = sorted(e["ttft_p90"] for e in ok.values())
    first = _key(grid["prior"]["candidates"][0]) if grid["prior"]["candidates"] else None
    # the candidate may name parameters outside the grid (vLLM defaults): match on the grid's own keys
    match = None
    if first is not None:
        cand = json.loads(first)
        for e in ok.values():
            if all(cand.get(n) == v for n, v in e["values"].items()):
                match = e
    best = min(values) if values else None
    rank = 1 + sum(v < match["ttft_p90"] for v in values) if match else None
    hits = [(e["predicted"].get("prefix_hit_gpu"), e.get("prefix_hit_rate")) for e in ok.values()]
    hits = [(p, m) for p, m in hits if p is not None and m is not None]
    rho = _spearman([p for p, _ in hits], [m for _, m in hits]) if len(hits) > 2 else None
    return {
        "candidate": grid["prior"]["candidates"][0] if grid["prior"]["candidates"] else None,
        "candidate_p90": match["ttft_p90"] if match else None,
        "candidate_rank": rank,
        "configs": len(values),
        "median_p90": statistics.median(values) if values else None,
        "best_p90": best,
        "predicted_vs_measured_hits_spearman": rho,
        "lines": grid["prior"]["lines"],
    }


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _steps(entry: Mapping[str, Any], n: int) -> dict[int, float]:
    """The running p90 each checkpoint of each pass reported (as the evaluator computes it)."""
    out: dict[int, float] = {}
    for k, ttfts in enumerate(entry["pass_ttft_ms"]):
        for q in range(1, CHECKPOINTS + 1):
            m = max(1, round(n * q / CHECKPOINTS))
            part = [x for x in ttfts[:m] if not np.isnan(x)]
            if part:
                out[k * CHECKPOINTS + q] = float(np.percentile(part, 90))
    return out


def prune_replay(grid: Mapping[str, Any], orders: int, seed: int) -> dict[str, Any]:
    """The pruner on the measured passes: every configuration once, baseline first, in random orders."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n = grid["requests"]
    ok = {k: e for k, e in grid["configs"].items() if e["status"] == "ok" and e.get("pass_ttft_ms")}
    steps = {k: _steps(e, n) for k, e in ok.items()}
    best_key = min(ok, key=lambda k: ok[k]["ttft_p90"])
    base = grid["baseline"]
    rng = random.Random(seed)
    saved, pruned_best, same_winner, pruned_counts = [], 0, 0, []
    for _ in range(orders):
        rest = [k for k in ok if k != base]
        rng.shuffle(rest)
        order = ([base] if base in ok else []) + rest
        study = optuna.create_study(direction="minimize")
        pruner = IncumbentPruner()
        used = total = 0
        pruned = []
        for k in order:
            e, t = ok[k], study.ask()
            last = max(steps[k])
            stopped = None
            for step in sorted(steps[k]):
                t.report(steps[k][step], step)
                frozen = study.get_trials(deepcopy=False)[t.number]
                if k != base and pruner.prune(study, frozen):
                    stopped = step
                    break
            total += last
            if stopped is not None:
                used += stopped
                pruned.append(k)
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
                continue
            used += last
            rec = TrialRecord(
                status=TrialStatus.OK,
                figures=Figures({"percentiles_ms": {"ttft_p90": e["ttft_p90"]}, "completed": n}),
                constraints=(-1.0,),
                passes=tuple(e["passes"]),
                baseline=k == base,
            )
            write_record(t, rec)
            study.tell(t, e["ttft_p90"])
        saved.append(1 - used / total)
        pruned_best += best_key in pruned
        winner = min(
            (t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value
        )
        same_winner += order[winner.number] == best_key
        pruned_counts.append(len(pruned))
    return {
        "orders": orders,
        "configs": len(ok),
        "replay_saved_median": statistics.median(saved),
        "replay_saved_min_max": [min(saved), max(saved)],
        "pruned_per_order_median": statistics.median(pruned_counts),
        "best_pruned_in_orders": pruned_best,
        "same_winner_in_orders": same_winner,
        "best": json.loads(best_key),
    }


def _finite(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if x is not None and not np.isnan(x)]


def median_of_passes(entry: Mapping[str, Any]) -> float:
    """The median of the passes' p90s (the trial's figure), from the timings."""
    return float(np.median([np.percentile(_finite(p), 90) for p in entry["pass_ttft_ms"] if _finite(p)]))


def pooled_p90(entry: Mapping[str, Any]) -> float:
    """The p90 over every request of every pass together (an alternative figure), from the timings."""
    return float(np.percentile(_finite([x for p in entry["pass_ttft_ms"] for x in p]), 90))


def with_pooled_figures(grid: Mapping[str, Any]) -> dict[str, Any]:
    """The grid judged by the alternative figure (the p90 over every pass's requests together)
    instead of the recorded one (kept under ``recorded_ttft_p90``): ``report --pooled``."""
    out = copy.deepcopy(dict(grid))
    for e in out["configs"].values():
        if e.get("status") == "ok" and e.get("pass_ttft_ms"):
            e["recorded_ttft_p90"], e["ttft_p90"] = e.get("ttft_p90"), pooled_p90(e)
    return out


def repeat_table(
    rep: Mapping[str, Any], warmup: str | None = None, env_arm: str | None = None
) -> dict[str, Any]:
    """The CV table of the restarts (those with ``warmup`` only, when given: runs recorded before
    the workload-shaped warm-up have no ``warmup`` key and used the short one; those of one
    ``--alternate-env`` arm only, when given: "" is the restarts without the variable)."""
    runs = [
        r
        for r in rep["runs"]
        if r["status"] == "ok"
        and warmup in (None, r.get("warmup", "short"))
        and env_arm in (None, r.get("env_arm"))
    ]
    first = [r["passes"][0]["ttft_p90"] for r in runs]
    trial = [r["ttft_p90"] for r in runs]
    medians = [median_of_passes(r) for r in runs]
    pooled = [pooled_p90(r) for r in runs]
    within = [_cv([p["ttft_p90"] for p in r["passes"]]) for r in runs if len(r["passes"]) > 1]
    ratio = []
    for r in runs:
        ts = r["timings_s"]
        one = ts.get("startup", 0) + ts.get("warmup", 0) + r["passes"][0]["duration_s"]
        whole = ts.get("startup", 0) + ts.get("warmup", 0) + ts.get("measure", 0)
        ratio.append(whole / one)
    two = [r["passes"][0]["ttft_p90"] / r["passes"][1]["ttft_p90"] for r in runs if len(r["passes"]) > 1]
    machine = [r["machine_ms"] for r in runs if r.get("machine_ms")]
    speed = {}
    if len(machine) == len(runs) > 2:
        speed = {
            "machine_ms": machine,
            "cv_machine": _cv(machine),
            "trial_vs_machine_r": float(np.corrcoef(trial, machine)[0, 1]),
        }
    return {
        "warmup": warmup or "/".join(sorted({r.get("warmup", "short") for r in runs})) or "short",
        **({"env_arm": env_arm or "(unset)"} if env_arm is not None else {}),
        "restarts": len(runs),
        "passes": [len(r["passes"]) for r in runs],
        "first_to_second_pass": [round(x, 2) for x in two],
        "first_pass_p90": first,
        "trial_p90": trial,
        "median_of_passes_p90": medians,
        "pooled_p90": pooled,
        "cv_one_pass": _cv(first),
        "cv_trial": _cv(trial),
        "cv_median_of_passes": _cv(medians),
        "cv_pooled": _cv(pooled),
        "cv_within_engine_median": statistics.median(within) if within else None,
        "trial_time_vs_one_pass": [round(x, 2) for x in ratio],
        **speed,
    }


def _neighbour_diffs(runs: Sequence[Mapping[str, Any]], a_arm: Any, b_arm: Any) -> list[float]:
    """Restarts taken in pairs (0-1, 2-3, ...): each ``b_arm(run)`` restart's p90 against the
    ``a_arm(run)`` one just before it (neighbours in time, so a drift of the machine's level over
    the series mostly cancels)."""
    return [
        (b["ttft_p90"] - a["ttft_p90"]) / a["ttft_p90"]
        for a, b in zip(runs[::2], runs[1::2], strict=False)
        if a_arm(a) and b_arm(b) and a["status"] == b["status"] == "ok"
    ]


def warmup_pairs(rep: Mapping[str, Any]) -> dict[str, Any] | None:
    """``--warmup alternate``: each workload-shaped restart against the short one just before it."""
    diffs = _neighbour_diffs(
        rep["runs"], lambda r: r.get("warmup") == "short", lambda r: r.get("warmup") == "like"
    )
    if not diffs:
        return None
    return {
        "pairs": len(diffs),
        "like_vs_short": [round(d, 3) for d in diffs],
        "mean": statistics.mean(diffs),
    }


def env_pairs(rep: Mapping[str, Any]) -> dict[str, Any] | None:
    """``--alternate-env``: each restart with the variable against the one without it just before."""
    runs = rep["runs"]
    diffs = _neighbour_diffs(runs, lambda r: r.get("env_arm") == "", lambda r: bool(r.get("env_arm")))
    if not diffs:
        return None
    arm = next(r["env_arm"] for r in runs if r.get("env_arm"))
    return {
        "env": arm,
        "pairs": len(diffs),
        "with_vs_without": [round(d, 3) for d in diffs],
        "mean": statistics.mean(diffs),
    }


def cmd_report(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"grids": [], "repeat": None}
    for path in args.files:
        data = json.loads(Path(path).read_text())
        if data["benchmark"] == "search_learning/grid":
            if args.pooled:
                data = with_pooled_figures(data)
            out["grids"].append(
                {
                    "file": str(path),
                    "workload": data["workload"],
                    "prior": prior_vs_random(data),
                    "pruner": prune_replay(data, args.orders, args.seed),
                }
            )
        else:
            variants = sorted({r.get("warmup", "short") for r in data["runs"]})
            arms = sorted({r["env_arm"] for r in data["runs"] if "env_arm" in r})
            if arms:
                out["repeat"] = [repeat_table(data, None, a) for a in arms]
            else:
                out["repeat"] = [repeat_table(data, v) for v in variants]
            out["warmup_pairs"] = warmup_pairs(data)
            out["env_pairs"] = env_pairs(data)
    print(markdown(out))
    return out


def _pairs_lines(what: str, diffs: Sequence[float], pairs: Mapping[str, Any]) -> list[str]:
    return [
        f"{what}, restart by restart ({pairs['pairs']} pairs): "
        + ", ".join(f"{x:+.1%}" for x in diffs)
        + f"; mean {pairs['mean']:+.1%}",
        "",
    ]


def markdown(out: Mapping[str, Any]) -> str:
    lines: list[str] = []
    for g in out["grids"]:
        pr, pn = g["prior"], g["pruner"]
        lines += [
            f"**{g['workload']}**: the prior's first informed candidate {pr['candidate']} measured p90 "
            f"{pr['candidate_p90']:.1f} ms, rank {pr['candidate_rank']} of {pr['configs']}; the median configuration "
            f"(the expected random trial) {pr['median_p90']:.1f} ms; the best {pr['best_p90']:.1f} ms. Predicted against "
            f"measured prefix-hit share over the grid's caching-on configurations: Spearman "
            f"{pr['predicted_vs_measured_hits_spearman']:.2f}.",
            "",
            f"Pruner over {pn['orders']} trial orders (baseline first): replay saved median "
            f"{pn['replay_saved_median']:.1%} (min {pn['replay_saved_min_max'][0]:.1%}, max {pn['replay_saved_min_max'][1]:.1%}), "
            f"{pn['pruned_per_order_median']:.0f} of {pn['configs'] - 1} trials pruned (median); the configuration best "
            f"without pruning ({pn['best']}) pruned in {pn['best_pruned_in_orders']} orders; the study's winner unchanged "
            f"in {pn['same_winner_in_orders']} of {pn['orders']}.",
            "",
        ]
    pairs, envp = out.get("warmup_pairs"), out.get("env_pairs")
    if pairs:
        lines += _pairs_lines("workload-shaped warm-up against the short one", pairs["like_vs_short"], pairs)
    if envp:
        lines += _pairs_lines(f"with {envp['env']} against without", envp["with_vs_without"], envp)
    for r in out.get("repeat") or ():
        lines += [
            f"warm-up: {r['warmup']}" + (f"; environment: {r['env_arm']}" if "env_arm" in r else ""),
            "",
            "| restarts | passes per trial (auto) | CV p90, first pass only | CV p90, median of passes | "
            "CV p90, all passes' requests | CV p90, as recorded | median within-engine CV | trial time / one-pass trial |",
            "|---|---|---|---|---|---|---|---|",
            f"| {r['restarts']} | {r['passes']} | {r['cv_one_pass']:.1%} | {r['cv_median_of_passes']:.1%} | "
            f"{r['cv_pooled']:.1%} | {r['cv_trial']:.1%} | {r['cv_within_engine_median']:.1%} | "
            f"{r['trial_time_vs_one_pass']} |",
            "",
            "first / second pass p90: " + ", ".join(f"{x:.2f}" for x in r["first_to_second_pass"]),
            "first-pass p90 (ms): " + ", ".join(f"{x:.1f}" for x in r["first_pass_p90"]),
            "median of passes (ms): " + ", ".join(f"{x:.1f}" for x in r["median_of_passes_p90"]),
            "all passes' requests (ms): " + ", ".join(f"{x:.1f}" for x in r["pooled_p90"]),
            "recorded trial figure (ms): " + ", ".join(f"{x:.1f}" for x in r["trial_p90"]),
            "",
        ]
        if r.get("machine_ms"):
            lines += [
                "machine speed before each restart (ms per unit, lower is faster): "
                + ", ".join(f"{x:.2f}" for x in r["machine_ms"])
                + f"; CV {r['cv_machine']:.1%}; correlation with the trial figure r = {r['trial_vs_machine_r']:+.2f}",
                "",
            ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__ or "")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid")
    r = sub.add_parser("repeat")
    for s in (g, r):
        s.add_argument("--workload", type=Path, default=c.EXAMPLES / "rag.jsonl")
        s.add_argument("--speed", type=float, default=3.0)
        s.add_argument("--out", type=Path, required=True)
        s.add_argument("--seed", type=int, default=0)
    g.add_argument("--passes", type=int, default=3)
    r.add_argument("--restarts", type=int, default=6)
    r.add_argument(
        "--alternate-env",
        metavar="NAME=VALUE",
        help="set this variable for the engines of odd restarts only (e.g. LD_PRELOAD=...), an A/B in time",
    )
    r.add_argument(
        "--machine-probe-s",
        type=float,
        default=3.0,
        help="time the machine's own speed for this long before each restart (0: off)",
    )
    r.add_argument(
        "--warmup",
        choices=("like", "short", "alternate"),
        default="like",
        help="the workload-shaped warm-up (the tool's), the short unrelated one, or one then the other",
    )
    m = sub.add_parser("machine", help="the idle machine's own speed, probe after probe (no engine)")
    m.add_argument("--probes", type=int, default=12)
    m.add_argument("--machine-probe-s", type=float, default=3.0)
    m.add_argument("--out", type=Path)
    rp = sub.add_parser("report")
    rp.add_argument("files", nargs="+", type=Path)
    rp.add_argument("--orders", type=int, default=200)
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument(
        "--pooled", action="store_true", help="judge the grids by the p90 over every pass's requests"
    )
    rp.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    c.setup_logging(args.verbose)
    commands = {"grid": cmd_grid, "repeat": cmd_repeat, "machine": cmd_machine, "report": cmd_report}
    result = commands[args.cmd](args)
    if args.out is not None:
        c.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
