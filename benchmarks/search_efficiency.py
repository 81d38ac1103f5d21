"""Search efficiency: how many trials the tool's sampler (TPE, as ``autotune run`` creates it) needs
to get within 5% of the best configuration of an exhaustive grid, against random search and the
grid itself, over many seeds.

Two steps. ``--measure-grid`` measures every configuration of a reduced space
(benchmarks/data/grid_space.yaml, 18 configurations) once on the real CPU build, each on a fresh
engine with ``--repeats`` replays (the prefix cache reset between them), and stores the table in
benchmarks/data/grid_cpu.json (about 15 min on 2 cores). The engines, workload, arrivals and
warm-up are those of ``autotune.tuning.build_setup`` for the choices of ``autotune run``; only the
repeats on one engine are this script's own (a study starts one engine per measurement). Then,
cheaply, each sampler runs whole studies through the library's study loop (``load_or_create`` +
``run_study``) whose evaluator looks the configuration up in the table and returns one of its
measured repeats at random, as a ``TrialRecord``: the measured noise. No engine is started in that
step.

    python benchmarks/search_efficiency.py --measure-grid      # grid (real vLLM) + replay
    python benchmarks/search_efficiency.py                     # replay the stored grid only
    python benchmarks/search_efficiency.py --quick             # fake server, 8 configs, 5 seeds
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np
import optuna

from autotune.bench import MetricsDelta, ReplayTarget, replay, scrape_metrics, summarize, warm_up
from autotune.engine import VLLM, EngineProcess
from autotune.errors import EngineCrashed, EngineStartError
from autotune.space import EngineConfig, RenderedConfig, SearchSpace, load_search_space
from autotune.study import (
    Figures,
    Metrics,
    Objective,
    TrialHooks,
    TrialPolicy,
    TrialRecord,
    TrialReport,
    TrialStatus,
    ensure_baseline,
    load_or_create,
    read_record,
    run_study,
)
from autotune.tuning import TuningSetup, build_setup

SPACE_PATH = c.REPO / "benchmarks" / "data" / "grid_space.yaml"
GRID_PATH = c.REPO / "benchmarks" / "data" / "grid_cpu.json"
# vLLM's defaults under the fixed flags (--kv-cache-memory-bytes=20M): the study's trial 0.
BASELINE = {"kv_cache_memory_bytes": 20, "block_size": 128, "enable_prefix_caching": True}
OBJECTIVE = Objective(metric="ttft_p90", min_throughput_ratio=0.95)
SAMPLERS = ("tpe", "random", "grid")
WITHIN = 0.05


# -- the space and its grid ----------------------------------------------------------------------
def grid_space(space: SearchSpace, *, quick: bool) -> SearchSpace:
    """The grid's space; with ``quick`` the first two choices of each parameter."""
    if not quick:
        return space
    params = {
        k: p.model_copy(update={"choices": p.choices[:2]}) if p.choices else p
        for k, p in space.parameters.items()
    }
    return space.model_copy(update={"name": space.name + "-quick", "parameters": params})


def grid_points(space: SearchSpace) -> list[dict[str, Any]]:
    names = list(space.tunable)
    choices = [list(p.choices) if p.choices else [True, False] for p in (space.tunable[n] for n in names)]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def key(values: Mapping[str, Any]) -> str:
    return json.dumps(dict(values), sort_keys=True)


# -- step 1: measure the grid --------------------------------------------------------------------
async def _measure_engine(engine: EngineProcess, setup: TuningSetup, repeats: int) -> list[dict[str, Any]]:
    """``repeats`` replays on one engine, each as a trial measures (warm-up, replay, /metrics
    before and after), the prefix cache emptied before each."""
    names, path = setup.engine.endpoints.metric_names, setup.engine.endpoints.metrics
    host_sources = setup.profile.cpu_hit_sources or ("host",)
    timeout = httpx.Timeout(600.0, connect=10.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits) as client:
        target = ReplayTarget(base_url=engine.base_url, model=engine.spec.model, api_key=engine.spec.api_key)
        chat = any(r.is_chat for r in setup.workload.requests)
        for _ in range(repeats):
            # A cold prefix cache for every repeat, as after a fresh start (needs VLLM_SERVER_DEV_MODE=1).
            try:
                reset = (await client.post(engine.base_url + "/reset_prefix_cache")).status_code == 200
            except httpx.HTTPError:
                reset = False
            await warm_up(client, target, count=setup.choices.warmup, chat=chat)
            before = await scrape_metrics(client, engine.base_url, names, path)
            result = await replay(
                client, target, setup.workload, setup.arrival, history=setup.choices.history
            )
            after = await scrape_metrics(client, engine.base_url, names, path)
            figures = summarize(result.timings, result.duration_s, slos_ms=setup.objective.request_slos)
            metrics = (
                MetricsDelta.between(before, after, host_sources, names=names) if before and after else None
            )
            out.append(
                {
                    "cache_reset": reset,
                    "figures": figures.as_dict(),
                    "metrics": metrics.as_dict() if metrics else None,
                }
            )
    return out


def _measure_config(setup: TuningSetup, rendered: EngineConfig, log: Path, repeats: int) -> dict[str, Any]:
    """One configuration: rejected before launch when it cannot fit (as a trial), else measured."""
    reasons = setup.fit_reasons(rendered)
    if reasons:
        reason = "does not fit before launch: " + "; ".join(reasons)
        return {
            "status": TrialStatus.INFEASIBLE.value,
            "failure": "does_not_fit",
            "reason": reason,
            "repeats": [],
        }
    # Every engine of the grid may be asked to empty its prefix cache (POST /reset_prefix_cache).
    spec = dataclasses.replace(setup.launch, env={**setup.launch.env, "VLLM_SERVER_DEV_MODE": "1"})
    engine = setup.engine.process(spec, rendered, log)
    entry: dict[str, Any] = {}
    try:
        engine.start()
        engine.wait_healthy()
        kv = setup.engine.log.kv_capacity(engine.log_text())
        entry["kv_tokens"] = kv.tokens if kv else None
        entry["repeats"] = asyncio.run(_measure_engine(engine, setup, repeats))
        engine.check_alive()
        entry["status"] = TrialStatus.OK.value
    except (EngineStartError, EngineCrashed) as exc:
        entry.update(status=TrialStatus.FAILED.value, failure=exc.failure, reason=str(exc), repeats=[])
    finally:
        engine.stop()
    entry["startup_s"] = engine.startup_s
    return entry


def measure_grid(args: Any, model: str) -> dict[str, Any]:
    log_dir = args.work_dir / f"grid-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload("rag.jsonl", quick=args.quick, work_dir=log_dir)
    slos = ("ttft_p90=200ms", "tpot_p90=50ms")  # per-request limits of the goodput figure
    choices = c.tuning_choices(
        model, wl_path, quick=args.quick, speed=args.speed, space=SPACE_PATH, slos=slos
    )
    env = c.environment()  # the date is the start of the measurement
    load_start = c.load_average()
    t0 = time.monotonic()
    table: dict[str, Any] = {}
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        space = grid_space(setup.space, quick=args.quick)
        points = grid_points(space)
        random.Random(args.seed).shuffle(points)  # measurement order decorrelated from the configuration
        for i, values in enumerate(points):
            rendered = EngineConfig.chosen(space, values)
            entry: dict[str, Any] = {
                "values": values,
                "args": list(setup.engine.render(rendered).args),
                "order": i,
                "load_average_start": c.load_average(),
            }
            entry.update(_measure_config(setup, rendered, log_dir / f"config-{i:02d}.log", args.repeats))
            entry["load_average_end"] = c.load_average()
            p90 = [Figures(r["figures"]).metric("ttft_p90") for r in entry["repeats"]]
            entry["ttft_p90"] = c.spread(p90)
            table[key(values)] = entry
            c.log.info("grid %d/%d %s: ttft_p90 %s", i + 1, len(points), values, [round(x, 1) for x in p90])
        wl, arrival, slo_ms = setup.workload, setup.arrival, setup.objective.request_slos
    return {
        "benchmark": "search_efficiency/grid",
        "env": env,
        "model": model,
        "fixed_args": list(c.fixed_args(quick=args.quick)),
        "space": str(SPACE_PATH.relative_to(c.REPO)),
        "workload": "examples/rag.jsonl",
        "requests": len(wl),
        "arrival": arrival.describe(),
        "repeats": args.repeats,
        "slo_ms": slo_ms,
        "baseline": key(BASELINE),
        "configs": table,
        "load_average": {"start": load_start, "end": c.load_average()},
        "wall_s": time.monotonic() - t0,
    }


# -- step 2: replay samplers against the table ---------------------------------------------------
class TableEvaluator:
    """The study's evaluator: look the configuration up, return one measured repeat at random."""

    def __init__(self, space: SearchSpace, grid: Mapping[str, Any], rng: random.Random):
        self.grid = grid
        self.rng = rng
        self.by_args = {
            tuple(VLLM.render(EngineConfig.chosen(space, e["values"])).args): k
            for k, e in grid["configs"].items()
        }
        self.by_args[()] = grid["baseline"]  # trial 0: no tuned flag, the fixed flags only

    def render(self, config: EngineConfig) -> RenderedConfig:
        return VLLM.render(config)

    def __call__(self, number: int, config: EngineConfig, listener: object = None) -> TrialRecord:
        entry = self.grid["configs"][self.by_args[tuple(self.render(config).args)]]
        timings = {"startup": entry["startup_s"]} if entry.get("startup_s") is not None else {}
        if entry["status"] != TrialStatus.OK.value or not entry["repeats"]:
            status = TrialStatus.INFEASIBLE if entry["status"] == "infeasible" else TrialStatus.FAILED
            reason = entry.get("reason")
            return TrialRecord(status=status, failure=entry.get("failure"), reason=reason, timings_s=timings)
        rep = self.rng.choice(entry["repeats"])
        return TrialRecord(
            status=TrialStatus.OK,
            figures=Figures(rep["figures"]),
            metrics=Metrics(rep["metrics"]) if rep.get("metrics") else None,
            kv_tokens=entry.get("kv_tokens"),
            timings_s=timings,
        )


def true_values(grid: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """Mean objective of each configuration, and the best one that meets the study's constraints
    (on means: output throughput >= 0.95 x the baseline's, no failed request)."""
    means: dict[str, float] = {}
    tput: dict[str, float] = {}
    failed: dict[str, float] = {}
    for k, e in grid["configs"].items():
        if e["status"] != TrialStatus.OK.value or not e["repeats"]:
            continue
        figs = [Figures(r["figures"]) for r in e["repeats"]]
        means[k] = statistics.fmean(f.metric(OBJECTIVE.metric) for f in figs)
        tput[k] = statistics.fmean(f.output_throughput for f in figs)
        failed[k] = max(f.failed for f in figs)
    base_tput = tput[grid["baseline"]]
    feasible = [k for k in means if tput[k] >= OBJECTIVE.min_throughput_ratio * base_tput and not failed[k]]
    return means, min(feasible, key=lambda k: means[k])


def run_sampler(
    sampler: str, seed: int, space: SearchSpace, grid: Mapping[str, Any], budget: int
) -> list[str | None]:
    """One study of ``budget`` trials (the baseline first); the configuration the tool would export
    after each trial (``best_feasible``), as a table key."""
    study = load_or_create("sqlite:///:memory:", f"{sampler}-{seed}", OBJECTIVE, seed)
    ensure_baseline(study)  # first, as `autotune run` does: before the grid's enqueued points
    if sampler == "random":
        study.sampler = optuna.samplers.RandomSampler(seed=seed)
    elif sampler == "grid":  # every other grid point once, in a random order
        rest = [p for p in grid_points(space) if key(p) != grid["baseline"]]
        random.Random(seed).shuffle(rest)
        for p in rest:
            study.enqueue_trial(p)
    evaluator = TableEvaluator(space, grid, random.Random(seed * 7919 + 1))
    best_after: list[str | None] = []

    def done(rep: TrialReport) -> None:
        if rep.best_number is None:
            best_after.append(None)
            return
        bt = study.trials[rep.best_number]
        best_after.append(grid["baseline"] if read_record(bt).baseline else key(bt.params))

    run_study(
        study, TrialPolicy(space=space, objective=OBJECTIVE), evaluator, budget, TrialHooks(on_done=done)
    )
    return best_after


def _run_job(job: tuple[str, int, SearchSpace, Mapping[str, Any], int]) -> list[str | None]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return run_sampler(*job)


def simulate(grid: Mapping[str, Any], space: SearchSpace, seeds: int, budget: int) -> dict[str, Any]:
    means, best = true_values(grid)
    optimum = means[best]
    out: dict[str, Any] = {
        "optimum": {"config": json.loads(best), "ttft_p90_ms": optimum},
        "baseline_ttft_p90_ms": means[grid["baseline"]],
        "within": WITHIN,
        "seeds": seeds,
        "budget": budget,
        "samplers": {},
    }
    jobs = [(sampler, seed) for sampler in SAMPLERS for seed in range(seeds)]
    t0 = time.monotonic()
    # Studies are independent and measure nothing: one process per core.
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=mp.get_context("fork")) as pool:
        results = list(pool.map(_run_job, [(s, seed, space, grid, budget) for s, seed in jobs]))
    by_job = dict(zip(jobs, results, strict=True))
    out["wall_s"] = time.monotonic() - t0
    for sampler in SAMPLERS:
        regrets = np.full((seeds, budget), np.nan)
        first: list[float] = []
        for seed in range(seeds):
            best_after = by_job[(sampler, seed)]
            r = [means[k] / optimum - 1.0 if k is not None else np.inf for k in best_after]
            r += [r[-1] if r else np.inf] * (budget - len(r))  # a study may stop early (grid exhausted)
            regrets[seed, : len(r)] = r
            hit = next((i + 1 for i, v in enumerate(r) if v <= WITHIN), None)
            first.append(float(hit) if hit is not None else np.inf)
        finite = [f for f in first if np.isfinite(f)]

        def pct(q: float, xs: list[float] = first) -> float | None:  # None: not reached within budget
            v = float(np.percentile(xs, q, method="inverted_cdf"))
            return v if np.isfinite(v) else None

        out["samplers"][sampler] = {
            "trials_to_within": [int(f) if np.isfinite(f) else None for f in first],
            "median_trials_to_within": pct(50),
            "p90_trials_to_within": pct(90),
            "share_reached": len(finite) / len(first),
            "median_regret_by_budget": [float(np.median(regrets[:, b])) for b in range(budget)],
            "p90_regret_by_budget": [float(np.percentile(regrets[:, b], 90)) for b in range(budget)],
        }
        c.log.info(
            "%s: median trials to within 5%%: %s",
            sampler,
            out["samplers"][sampler]["median_trials_to_within"],
        )
    return out


def _trials(value: float | None, budget: int) -> str:
    return f"{value:g}" if value is not None else f"> {budget}"


def markdown(result: Mapping[str, Any]) -> str:
    grid = result["grid"]
    sim = result["simulation"]
    load = grid["load_average"]
    parts = [c.md_header("Search efficiency (search_efficiency.py)", grid["env"], load)]
    parts.append(
        f"Grid: {len(grid['configs'])} configurations of `{grid['space']}` measured on {grid['env']['date']} "
        f"(commit `{grid['env']['commit']}`, {grid['env']['engine']}; `{grid['env']['command']}`), "
        f"workload {grid['workload']} ({grid['arrival']}), {grid['repeats']} repeats per configuration "
        f"on one engine each (prefix cache reset between repeats), grid wall time {grid['wall_s']:.0f} s.\n"
    )
    rows = []
    for k, e in sorted(grid["configs"].items(), key=lambda kv: kv[1]["ttft_p90"].get("mean", 1e18)):
        v = e["values"]
        s = e["ttft_p90"]
        rows.append(
            [
                f"{v['kv_cache_memory_bytes']}M",
                v["block_size"],
                "on" if v["enable_prefix_caching"] else "off",
                c.fmt_spread(s) if e["status"] == "ok" else f"{e['status']} ({e.get('failure')})",
                f"{s['cv']:.1%}" if s.get("n", 0) > 1 else "-",
                e["order"] + 1,
                (e.get("load_average_start") or ["-"])[0],
                "baseline" if k == grid["baseline"] else "",
            ]
        )
    headers = [
        "KV",
        "block",
        "prefix cache",
        "TTFT p90 ms mean (min-max)",
        "CV",
        "measured #",
        "load (1 min)",
        "",
    ]
    parts.append(c.md_table(headers, rows))
    opt = sim["optimum"]
    parts.append(
        f"\nOptimum (feasible, by mean): {opt['config']} at {opt['ttft_p90_ms']:.1f} ms; baseline "
        f"{sim['baseline_ttft_p90_ms']:.1f} ms. Replay: {sim['seeds']} seeds per sampler, budget "
        f"{sim['budget']} trials (the baseline first), the library's study loop with a table lookup "
        f"(one measured repeat drawn at random per trial); the configuration judged is the one the "
        f"tool would export after each trial (`best_feasible`). Within = mean TTFT p90 <= 1.05 x optimum.\n"
    )
    s = sim["samplers"]
    parts.append(
        c.md_table(
            ["sampler", "median trials to within 5%", "p90", "reached within budget"],
            [
                [
                    name,
                    _trials(s[name]["median_trials_to_within"], sim["budget"]),
                    _trials(s[name]["p90_trials_to_within"], sim["budget"]),
                    f"{s[name]['share_reached']:.0%}",
                ]
                for name in SAMPLERS
            ],
        )
    )
    budgets = list(range(sim["budget"]))
    parts.append("\nMedian regret (mean TTFT p90 of the exported config / optimum - 1) after N trials:\n")
    parts.append(
        c.md_table(
            ["N", *SAMPLERS],
            [[b + 1, *(f"{s[n]['median_regret_by_budget'][b]:.1%}" for n in SAMPLERS)] for b in budgets],
        )
    )
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument("--measure-grid", action="store_true", help="measure the grid (real vLLM) first")
    p.add_argument("--grid", type=Path, help=f"grid table to read/write (default {GRID_PATH})")
    p.add_argument("--repeats", type=int, help="replays per configuration (default 3; quick 2)")
    p.add_argument("--speed", type=float, help="replay speed-up (default 3; quick 20)")
    p.add_argument("--seeds", type=int, help="seeds per sampler (default 100; quick 5)")
    p.add_argument("--budget", type=int, help="trials per study (default: the grid size)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.repeats = args.repeats or (2 if args.quick else 3)
    args.speed = args.speed or (20.0 if args.quick else 3.0)
    args.seeds = args.seeds or (5 if args.quick else 100)
    c.setup_logging(args.verbose)
    space = grid_space(load_search_space(SPACE_PATH), quick=args.quick)
    grid_path = args.grid or (args.work_dir / "grid_quick.json" if args.quick else GRID_PATH)
    t0 = time.monotonic()
    if args.measure_grid or args.quick:
        model = c.bench_model(args.models_dir)
        grid = measure_grid(args, model)
        c.write_json(grid_path, grid)
    else:
        if not grid_path.exists():
            print(f"{grid_path}: no grid table (fix: run with --measure-grid first)", file=sys.stderr)
            return 2
        grid = json.loads(grid_path.read_text())
    grid_s = time.monotonic() - t0
    budget = args.budget or len(grid["configs"])
    t1 = time.monotonic()
    sim = simulate(grid, space, args.seeds, budget)
    result = {
        "benchmark": "search_efficiency",
        "quick": args.quick,
        "env": c.environment(),
        "grid_path": str(grid_path),
        "grid": grid,
        "simulation": sim,
        "wall_s": {"grid": grid_s, "simulation": time.monotonic() - t1},
    }
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(
        f"\nwall time: grid {grid_s:.0f} s, simulation {result['wall_s']['simulation']:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
