"""The peer's method beside the tool's (issue 45): vLLM's auto_tune grid against ``autotune run
--objective capacity``, on the same model, workload, KV pool and SLO; best capacity found, engine
starts and wall time.

**The grid method** is vLLM's ``benchmarks/auto_tune/auto_tune.sh`` (vllm-project/vllm, read at
01277f9cd6f7; :mod:`_auto_tune` says what it does and where it is adapted): ``NUM_SEQS_LIST`` x
``NUM_BATCHED_TOKENS_LIST`` (``--num-seqs``, ``--num-batched-tokens``); per cell one start, rate inf,
then down 1 req/s (``--step``) until the latency limit holds, with its 5 s sleep after each cache
reset and 10 s after each cell (``--settle-s``, ``--cell-pause-s``) and its memory probe's start
(``--no-memory-probe``). Adapted: the user's workload with Poisson arrivals at each rate, and the
tool's SLO as the limit (``--grid-slo`` for another, e.g. ``e2el_p99=2000ms``, auto_tune's own).

**The tool**: ``python -m autotune run --objective capacity`` as a subprocess (its own study folder
under the work folder), on a space of exactly the grid's two parameters and choices (``role:
max_seqs`` and ``batched_tokens``, as search_spaces/cpu.yaml), ``--n-trials`` trials (trial 0: vLLM's
defaults, 128 x 2048 on the CPU build, a cell of the default grid), then its confirmation
(``--confirm-rounds``, A B A B). Its engine starts are its trial and confirmation logs.

The comparison: each method's best as it reports it (the grid: throughput at the rate that held;
the tool: the highest offered load that held), and, like for like, the requests/s served at the
level that held (the tool's exported trial). Target (issue 45): the tool's best capacity at least the
grid's within noise (here: within the tool's tolerance), in at most half its engine starts (counted
with and without the tool's confirmation).

    python benchmarks/capacity_vs_grid.py            # real CPU build: 3 x 2 grid, 3 trials (20-40 min)
    python benchmarks/capacity_vs_grid.py --quick    # the fake server: 2 x 2, no sleeps (about 3 min)

Prints the grid, the tool's trials and the comparison; writes them as JSON (``--json-out``,
default benchmarks/results/capacity_vs_grid.json; none with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import _levels
import optuna
from _auto_tune import SEQS, SOURCE, TOKENS, GridPlan, run_grid

from autotune.bench._capacity import CapacityResult, base_request_rate, bracket_capacity
from autotune.engine import install_signal_handlers
from autotune.errors import EngineCrashed, EngineStartError
from autotune.space import EngineConfig
from autotune.study import parse_slo, read_record
from autotune.trial._capacity import measure_level
from autotune.tuning import TuningSetup, build_setup

DEFAULT_JSON = c.REPO / "benchmarks" / "results" / "capacity_vs_grid.json"


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument("--slo", action="append", help="the SLO, as autotune's --slo (default ttft_p50=30ms)")
    p.add_argument("--grid-slo", action="append", help="the grid's latency limit (default: the --slo ones)")
    p.add_argument("--num-seqs", help="NUM_SEQS_LIST (default '16 64 128'; quick '16 128')")
    p.add_argument("--num-batched-tokens", help="NUM_BATCHED_TOKENS_LIST (default '512 2048')")
    p.add_argument(
        "--step", type=float, default=1.0, help="the grid's rate step, req/s (default 1, as auto_tune.sh)"
    )
    p.add_argument(
        "--settle-s", type=float, help="sleep after each cache reset (default 5, as auto_tune.sh; quick 0)"
    )
    p.add_argument(
        "--cell-pause-s", type=float, help="sleep after each cell (default 10, as auto_tune.sh; quick 0)"
    )
    p.add_argument(
        "--memory-probe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start the last cell once before the grid, as auto_tune.sh's memory probe (default: on)",
    )
    p.add_argument(
        "--n-trials", type=int, default=3, help="the tool's trials, the baseline included (default 3)"
    )
    p.add_argument("--confirm-rounds", type=int, default=2, help="the tool's confirmation rounds (default 2)")
    p.add_argument(
        "--tolerance", type=float, default=0.10, help="the tool's --capacity-tolerance (default 0.1)"
    )
    p.add_argument("--levels", type=int, default=6, help="the tool's --capacity-levels (default 6)")
    p.add_argument("--workload", default="rag.jsonl", help="file in examples/, or a path (default rag.jsonl)")
    p.add_argument("--model", help="the model's directory (default: the CPU build's tiny bench model)")
    p.add_argument(
        "--engine-arg",
        action="append",
        help="a fixed flag of both methods, in place of the CPU build's (repeatable; the GPU script's)",
    )
    p.add_argument(
        "--baseline-arg",
        action="append",
        help="a flag of the baseline only, in place of the CPU build's 20 MiB pool (repeatable; 'none': none)",
    )
    p.add_argument(
        "--profile", default="cpu", help="the tool's --profile (default cpu; the GPU script: cuda)"
    )
    p.add_argument(
        "--engine-defaults",
        default="128,2048",
        help="the engine's own max-num-seqs,max-num-batched-tokens: the tool's baseline (default 128,2048, the "
        "CPU build's; vLLM 0.26 on an H200: 1024,8192)",
    )
    p.add_argument("--min-level", default="10s", help="the tool's --capacity-min-level (default 10s)")
    p.add_argument("--startup-timeout", type=int, default=300, help="seconds an engine may take to start")
    p.add_argument("--speed", type=float, help="the tool's replay speed-up at 1x (default 1; quick 8)")
    p.add_argument("--launcher", help="command that starts the server (default: vLLM's; quick: the fake)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals and of the tool's study")
    p.add_argument("--only", choices=("grid", "tool"), help="run one side only")
    p.add_argument(
        "--referee-rounds",
        type=int,
        default=2,
        help="A B A B rounds measuring both methods' picks by one measure, the tool's bisection (default 2; 0: none)",
    )
    p.add_argument(
        "--grid-json",
        type=Path,
        help="with --only tool: compare against the grid of an earlier run's JSON (same model, workload, SLO)",
    )
    args = p.parse_args(argv)
    _defaults(args)
    c.setup_logging(args.verbose)
    install_signal_handlers()  # SIGTERM/SIGHUP: the engine stopped, then unwound as Ctrl-C
    if args.quick:  # the fake's time to first token falls with --max-num-batched-tokens
        _levels.use_fake_env({"FAKE_TTFT_SCALE": "2"})
    env = c.environment()
    model = args.model or c.bench_model(args.models_dir)
    work = args.work_dir / f"capacity-vs-grid-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload(args.workload, quick=args.quick, work_dir=work, max_requests=24)
    seqs_default, tokens_default = (int(x) for x in args.engine_defaults.split(","))
    space = _write_space(
        work / "space.yaml", args.seqs, args.tokens, args.platform, defaults=(seqs_default, tokens_default)
    )
    choices = _levels.capacity_choices(
        model, wl_path, quick=args.quick, slos=args.slo, tolerance=args.tolerance, levels=args.levels,
        speed=args.speed, launcher=args.launcher, space=space, min_level=args.min_level, engine=_engine(args),
    )  # fmt: skip
    result: dict[str, Any] = {
        "benchmark": "capacity_vs_grid",
        "quick": args.quick,
        "env": env,
        "model": model,
        "fixed_args": [*args.fixed, *args.baseline],
        "workload": args.workload if Path(args.workload).is_file() else f"examples/{args.workload}",
        "min_level": args.min_level,
        "slo": list(args.slo),
        "grid_slo": list(args.grid_slo),
        "tolerance": args.tolerance,
        "source": SOURCE,
    }
    with build_setup(choices) as setup:
        result.update(requests=len(setup.workload), tool_arrival=setup.arrival.describe())
        if args.only != "tool":
            result["grid"] = run_grid(setup, _grid_plan(args), work / "grid")
    if args.only != "grid":
        result["tool"] = _tool(args, model, wl_path, space, work / "tool")
    if args.grid_json is not None and "grid" not in result:
        earlier = json.loads(args.grid_json.read_text())
        result["grid"] = earlier["grid"]
        result["grid_from"] = {"json": str(args.grid_json), "env": earlier.get("env")}
    if "grid" in result and "tool" in result:
        result["comparison"] = _compare(result["grid"], result["tool"], args.tolerance)
        if args.referee_rounds > 0:
            with build_setup(choices) as setup:
                result["referee"] = _referee(
                    setup, result["grid"]["best"], result["tool"]["exported"], args, work / "referee"
                )
    c.write_json(args.json_out, result)
    print(markdown(result))
    return 0


def _defaults(args: Any) -> None:
    args.slo = args.slo or ["ttft_p50=30ms"]
    args.grid_slo = args.grid_slo or list(args.slo)
    args.seqs = [int(x) for x in (args.num_seqs or ("16 128" if args.quick else "16 64 128")).split()]
    args.tokens = [int(x) for x in (args.num_batched_tokens or "512 2048").split()]
    args.speed = args.speed or (8.0 if args.quick else 1.0)
    args.settle_s = args.settle_s if args.settle_s is not None else (0.0 if args.quick else 5.0)
    args.cell_pause_s = args.cell_pause_s if args.cell_pause_s is not None else (0.0 if args.quick else 10.0)
    if args.json_out is None and not args.quick:
        args.json_out = DEFAULT_JSON
    quick_fixed = c.QUICK_FIXED_ARGS if args.quick else c.FIXED_ARGS
    args.fixed = tuple(args.engine_arg) if args.engine_arg else quick_fixed
    args.baseline = (
        tuple(a for a in args.baseline_arg if a != "none") if args.baseline_arg else c.BASELINE_ARGS
    )
    args.platform = "cpu" if args.quick else args.profile.split("-")[0]  # cuda-native, cuda-lmcache: cuda


def _engine(args: Any) -> dict[str, Any]:
    """The engine both methods start: fixed flags, the baseline's, the profile, the start-up time."""
    return {
        "fixed": args.fixed,
        "baseline": args.baseline,
        "profile": args.profile,
        "startup_timeout": args.startup_timeout,
    }


def _grid_plan(args: Any) -> GridPlan:
    return GridPlan(
        num_seqs=args.seqs,
        num_batched_tokens=args.tokens,
        limit_ms=dict(parse_slo(s) for s in args.grid_slo),
        step=args.step,
        settle_s=args.settle_s,
        cell_pause_s=args.cell_pause_s,
        memory_probe=args.memory_probe,
    )


def _write_space(
    path: Path,
    seqs: Sequence[int],
    tokens: Sequence[int],
    platform: str = "cpu",
    *,
    defaults: tuple[int, int] = (128, 2048),
) -> Path:
    """The grid's two parameters as a search space (their entries in search_spaces/cpu.yaml, the
    grid's choices); the baseline's KV pool is the same for every configuration of both methods."""
    path.write_text(
        f"name: capacity-vs-grid\nplatform: {platform}\n"
        "description: auto_tune.sh's grid, max_num_seqs x max_num_batched_tokens (benchmarks/capacity_vs_grid.py)\n"
        "parameters:\n"
        f"  {TOKENS}:\n    role: batched_tokens\n    type: categorical\n    choices: {list(tokens)}\n"
        f"    flag: --max-num-batched-tokens\n    default: {defaults[1]}\n"
        f"  {SEQS}:\n    role: max_seqs\n    type: categorical\n    choices: {list(seqs)}\n"
        f"    flag: --max-num-seqs\n    default: {defaults[0]}\n"
    )
    return path


# -- the tool (autotune run --objective capacity) -------------------------------------------------
def _tool(args: Any, model: str, workload: Path, space: Path, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    study = "capacity"
    cmd = [
        sys.executable, "-m", "autotune", "run", "--workload", str(workload), "--model", model,
        "--space", str(space), "--objective", "capacity", *[f"--slo={s}" for s in args.slo],
        "--capacity-tolerance", str(args.tolerance), "--capacity-levels", str(args.levels),
        "--n-trials", str(args.n_trials), "--confirm-rounds", str(args.confirm_rounds),
        "--speed", f"{args.speed:g}", "--seed", str(args.seed),
        "--studies-dir", str(work), "--study", study, "--out", str(work / "best.yaml"),
        "--capacity-min-level", args.min_level, "--startup-timeout", str(args.startup_timeout),
        *[f"--engine-arg={a}" for a in args.fixed], *[f"--baseline-arg={a}" for a in args.baseline],
    ]  # fmt: skip
    if args.quick:
        cmd += ["--launcher", args.launcher or " ".join(c.FAKE_LAUNCHER), "--no-check-args"]
    else:
        cmd += ["--profile", args.profile, *(["--launcher", args.launcher] if args.launcher else [])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(c.REPO), os.environ.get("PYTHONPATH")])),
    }
    load_start = c.load_average()
    t0 = time.monotonic()
    with (work / "stdout.txt").open("w") as out, (work / "stderr.txt").open("w") as err:
        rc = _run_tool(cmd, env, out, err)
    wall = time.monotonic() - t0
    if rc != 0:
        tail = (work / "stderr.txt").read_text()[-3000:]
        raise SystemExit(f"autotune run exited {rc}; its stderr ends:\n{tail}")
    result = _read_study(work, study)
    starts_search = len(list((work / study).glob("trial-*.log")))
    starts_confirm = len(list((work / study / "confirm").glob("trial-*.log")))
    result.update(
        command=" ".join(cmd),
        engine_starts={"search": starts_search, "confirmation": starts_confirm, "total": starts_search + starts_confirm},
        wall_s=wall,
        load_average={"start": load_start, "end": c.load_average()},
        summary=[ln for ln in (work / "stderr.txt").read_text().splitlines() if ln.startswith("re-measured")],
    )  # fmt: skip
    return result


def _run_tool(cmd: list[str], env: Mapping[str, str], out: Any, err: Any) -> int:
    """The tool as a subprocess; on any exception here (Ctrl-C too) it is told to stop (SIGTERM: it
    stops its engine and unwinds), then killed; its engines' guardians stop them if it dies."""
    proc = subprocess.Popen(cmd, cwd=c.REPO, env=dict(env), stdout=out, stderr=err)
    try:
        return proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def _read_study(work: Path, name: str) -> dict[str, Any]:
    st = optuna.load_study(study_name=name, storage=f"sqlite:///{work / (name + '.db')}")
    trials = []
    for t in st.get_trials(deepcopy=False):
        if not t.state.is_finished():
            continue
        rec = read_record(t)
        f = dict(rec.figures.raw) if rec.figures is not None else {}
        held = [lv for lv in f.get("capacity_levels") or [] if lv.get("held")]
        top = max(held, key=lambda lv: lv["x"]) if held else None
        trials.append(
            {
                "trial": t.number,
                "params": dict(t.params) or {"(baseline)": "vLLM defaults"},
                "status": rec.status.value,
                "capacity": f.get("capacity"),
                "capacity_x": f.get("capacity_x"),
                "capacity_hi": f.get("capacity_hi"),
                "capacity_hi_x": f.get("capacity_hi_x"),
                "served_rps": top["served_rps"] if top else None,
                "levels": len(f.get("capacity_levels") or []),
                "startup_s": rec.startup_s,
                "reason": rec.reason,
            }
        )
    ok = [t for t in trials if t["status"] == "ok" and t["capacity"] is not None]
    best = max(ok, key=lambda t: (t["capacity"], -t["trial"])) if ok else None
    confirmation = next(
        (v for k, v in st.user_attrs.items() if k.startswith("confirmation_") and isinstance(v, dict)), None
    )
    exported = best
    if confirmation is not None:  # the trial confirmed, else the baseline (what `run` exports)
        number = confirmation.get("trial") if confirmation.get("confirmed") else 0
        exported = next((t for t in trials if t["trial"] == number), None)
    return {
        "trials": trials,
        "best_measured": best,
        "exported": exported,
        "confirmation": None
        if confirmation is None
        else {k: confirmation.get(k) for k in ("trial", "confirmed", "inconclusive", "runs", "why")},
    }


# -- the referee: both picks by one measure ------------------------------------------------------
def _pick_args(row: Mapping[str, Any] | None, defaults: tuple[int, int]) -> tuple[str, ...]:
    """A method's pick as flags on top of the fixed and baseline ones (the defaults' own values where it
    picked vLLM's defaults, so both arms name the same two flags)."""
    params = {} if row is None else row.get("params", row)
    seqs, tokens = params.get(SEQS, defaults[0]), params.get(TOKENS, defaults[1])
    return ("--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(tokens))


def _referee(
    setup: TuningSetup, grid_best: Mapping[str, Any] | None, tool_best: Mapping[str, Any] | None, args: Any,
    work: Path,
) -> dict[str, Any]:  # fmt: skip
    """The two methods report capacity by two measures (the grid: Poisson arrivals at a rate stepped down
    1 req/s; the tool: the file's own arrivals scaled), so their own figures do not compare. Here both
    picks are measured by one, A B A B (``--referee-rounds``), each run a fresh engine start and the
    tool's bisection as every capacity trial runs it (the same plan, warm-up and cache resets)."""
    assert setup.capacity is not None
    plan, base_rps = setup.capacity, base_request_rate(setup.workload, setup.arrival)
    defaults = tuple(int(x) for x in args.engine_defaults.split(","))
    arms = {"grid": _pick_args(grid_best, defaults), "tool": _pick_args(tool_best, defaults)}  # type: ignore[arg-type]
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {"grid": [], "tool": []}
    if arms["grid"] == arms["tool"]:
        return {"same_configuration": True, "args": list(arms["grid"]), "runs": runs}
    for r in range(args.referee_rounds):
        for arm in ("grid", "tool"):
            runs[arm].append(_referee_run(setup, arms[arm], plan, base_rps, work / f"{arm}-{r + 1}.log"))
    med = {arm: _median([x["capacity"] for x in runs[arm] if x.get("capacity") is not None]) for arm in runs}
    spread = {
        arm: _range([x["capacity"] for x in runs[arm] if x.get("capacity") is not None]) for arm in runs
    }
    g, t = med["grid"], med["tool"]
    noise = max((hi - lo for lo, hi in spread.values() if lo is not None and hi is not None), default=0.0)
    return {
        "same_configuration": False,
        "args": {arm: list(a) for arm, a in arms.items()},
        "runs": runs,
        "median": med,
        "range": spread,
        "noise_rps": noise,  # the wider arm's range across its own runs: the measure's run-to-run spread
        "tool_vs_grid": None if not g or t is None else t / g,
        # at least the grid's pick within noise: the tool's median no lower than the grid's less the spread
        # either arm showed across its own starts, or the tolerance, whichever is larger
        "tool_at_least_grid_within_noise": (
            None if g is None or t is None else t >= g - max(noise, g * args.tolerance)
        ),
    }


def _referee_run(
    setup: TuningSetup, flags: tuple[str, ...], plan: Any, base_rps: float, log: Path
) -> dict[str, Any]:
    try:
        with _levels.started_engine(
            setup, EngineConfig.recorded(flags), log, cache_dir=log.parent / "cache"
        ) as proc:
            result = asyncio.run(_bisect(setup, proc.base_url, plan, base_rps))
            proc.check_alive()
    except (EngineStartError, EngineCrashed) as exc:
        c.log.warning("referee %s: engine failed: %s", " ".join(flags), exc)
        return {"status": "failed", "reason": str(exc)}
    held, broke = result.held, result.broke
    c.log.info("referee %s: %.3g req/s", " ".join(flags), result.capacity_rps)
    return {
        "status": "ok",
        "startup_s": proc.startup_s,
        "capacity": result.capacity_rps if held is not None else None,
        "capacity_x": None if held is None else held.multiplier,
        "capacity_hi_x": None if broke is None else broke.multiplier,
        "served_rps": None if held is None else held.figures.request_throughput,
        "levels": len(result.levels),
    }


async def _bisect(setup: TuningSetup, base_url: str, plan: Any, base_rps: float) -> CapacityResult:
    async with _levels.level_context(setup, base_url, setup.arrival) as ctx:
        return await bracket_capacity(plan, base_rps, lambda m: measure_level(ctx, plan, base_rps, m))


def _median(xs: Sequence[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def _range(xs: Sequence[float]) -> tuple[float | None, float | None]:
    return (min(xs), max(xs)) if xs else (None, None)


# -- the comparison ----------------------------------------------------------------------------------
def _compare(grid: Mapping[str, Any], tool: Mapping[str, Any], tolerance: float) -> dict[str, Any]:
    g, t = grid["best"], tool["exported"]
    g_served = g["throughput"] if g else 0.0
    t_served = (t or {}).get("served_rps") or 0.0
    starts = tool["engine_starts"]
    return {
        "grid_best_served_rps": g_served,
        "tool_best_served_rps": t_served,
        "tool_best_capacity_rps": (t or {}).get("capacity"),
        "tool_vs_grid": t_served / g_served if g_served else None,
        "tool_at_least_grid_within_tolerance": t_served >= g_served * (1 - tolerance),
        "engine_starts": {"grid": grid["engine_starts"], **{f"tool_{k}": v for k, v in starts.items()}},
        "half_the_starts_search": starts["search"] <= grid["engine_starts"] / 2,
        "half_the_starts_total": starts["total"] <= grid["engine_starts"] / 2,
        "wall_s": {"grid": grid["wall_s"], "grid_sleeps": grid["slept_s"], "tool": tool["wall_s"]},
    }


def _cfg(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "-"
    params = row.get("params", row)
    if SEQS not in params:
        return "vLLM defaults"
    return f"{params[SEQS]} seqs x {params[TOKENS]} tokens"


def _bracket(t: Mapping[str, Any]) -> str:
    if t["capacity_x"] is None:
        return "-"
    hi = (
        "none broke"
        if t["capacity_hi_x"] is None
        else f"broke {t['capacity_hi_x']:.3g}x ({t['capacity_hi']:.3g} req/s)"
    )
    return f"held {t['capacity_x']:.3g}x, {hi}"


def _confirmation(conf: Mapping[str, Any] | None) -> str:
    if conf is None:
        return "none (the best trial was the baseline, or --confirm-rounds 0)"
    verdict = "confirmed" if conf["confirmed"] else "not confirmed: the baseline exported"
    return f"trial {conf['trial']} {verdict} ({conf['why']})"


def markdown(r: Mapping[str, Any]) -> str:
    load = (r.get("grid") or r.get("tool") or {}).get("load_average") or {"start": [], "end": []}
    parts = [c.md_header("The peer's grid beside the tool (capacity_vs_grid.py)", r["env"], load)]
    parts.append(
        f"Model {r['model']}, fixed `{' '.join(r['fixed_args'])}` for every configuration of both methods; "
        f"{r['workload']} ({r['requests']} requests); SLO {', '.join(r['slo'])}. Grid method: {SOURCE}, "
        f"adapted (see the script's docstring); its limit {', '.join(r['grid_slo'])}.\n"
    )
    if r.get("grid") is not None:
        parts += _grid_md(r["grid"])
    if r.get("tool") is not None:
        parts += _tool_md(r["tool"])
    if r.get("comparison") is not None:
        parts += _compare_md(r["grid"], r["tool"], r["comparison"], r["tolerance"])
    if r.get("referee") is not None:
        parts += _referee_md(r["referee"])
    return "\n".join(parts)


def _referee_md(ref: Mapping[str, Any]) -> list[str]:
    if ref["same_configuration"]:
        return [f"\nReferee: both methods picked `{' '.join(ref['args'])}`; nothing to tell apart."]
    rows = []
    for arm in ("grid", "tool"):
        caps = [x.get("capacity") if x["status"] == "ok" else "failed" for x in ref["runs"][arm]]
        lo, hi = ref["range"][arm]
        rows.append([
            f"{arm}'s pick", f"`{' '.join(ref['args'][arm])}`",
            ", ".join("none held" if x is None else x if isinstance(x, str) else f"{x:.3g}" for x in caps),
            "-" if ref["median"][arm] is None else f"{ref['median'][arm]:.3g}",
            "-" if lo is None else f"{lo:.3g}-{hi:.3g}",
        ])  # fmt: skip
    ratio = "-" if ref["tool_vs_grid"] is None else f"{ref['tool_vs_grid']:.2f}x"
    verdict = {True: "yes", False: "**no**", None: "-"}[ref["tool_at_least_grid_within_noise"]]
    return [
        "\nReferee: both picks by one measure (the tool's bisection, one engine start a run, A B A B):\n",
        c.md_table(["arm", "flags", "capacity req/s by run", "median", "range"], rows),
        f"\nTool's pick against the grid's, by one measure: {ratio}; at least the grid's within noise "
        f"({ref['noise_rps']:.3g} req/s, the wider arm's range): {verdict}.",
    ]


def _grid_md(grid: Mapping[str, Any]) -> list[str]:
    metric = next(iter(grid["limit"]))
    rows = []
    for cell in grid["cells"]:
        inf = cell["levels"][0] if cell["levels"] else None
        rows.append(
            [
                _cfg(cell),
                f"{cell.get('startup_s') or 0:.0f}" if cell["started"] else f"failed: {cell.get('failure')}",
                "-" if inf is None else f"{inf['served_rps']:.3g} req/s, {metric} {inf[metric]:.1f} ms",
                " ".join(f"{lv['rate']:g}" for lv in cell["levels"][1:]) or "-",
                str(cell["rate"]) if cell["meets"] else "-",
                f"{cell['throughput']:.3g}" if cell["meets"] else "does not meet",
                cell["levels"][-1]["tool_verdict"] if cell["meets"] else "-",
                f"{cell['wall_s']:.0f}",
            ]
        )
    headers = [
        "cell",
        "start s",
        "rate inf",
        "rates stepped",
        "holds at",
        "throughput req/s",
        "tool's verdict",
        "s",
    ]
    probe = "1 start" if grid["memory_probe"] else "skipped"
    return [
        "Grid (auto_tune.sh's method):\n",
        c.md_table(headers, rows),
        f"\nMemory probe: {probe}; {grid['engine_starts']} engine starts, wall {grid['wall_s'] / 60:.1f} min "
        f"(of which the script's sleeps {grid['slept_s']:.0f} s).\n",
    ]


def _tool_md(tool: Mapping[str, Any]) -> list[str]:
    rows = [
        [
            t["trial"],
            _cfg(t),
            t["status"],
            "-" if t["capacity"] is None else f"{t['capacity']:.3g}",
            _bracket(t),
            "-" if t["served_rps"] is None else f"{t['served_rps']:.3g}",
            t["levels"],
        ]
        for t in tool["trials"]
    ]
    headers = ["trial", "configuration", "status", "capacity req/s", "bracket", "served req/s", "levels"]
    s = tool["engine_starts"]
    return [
        "Tool (`autotune run --objective capacity`):\n",
        c.md_table(headers, rows),
        f"\nConfirmation: {_confirmation(tool['confirmation'])}; {s['total']} engine starts ({s['search']} "
        f"trials, {s['confirmation']} confirmation), wall {tool['wall_s'] / 60:.1f} min.\n",
    ]


def _compare_md(
    grid: Mapping[str, Any], tool: Mapping[str, Any], cmp_: Mapping[str, Any], tolerance: float
) -> list[str]:
    g, t, st = grid["best"], tool["exported"], cmp_["engine_starts"]
    rows = [
        ["grid (auto_tune.sh)", _cfg(g), "-" if g is None else f"{g['throughput']:.3g} req/s at rate {g['rate']}",
         f"{cmp_['grid_best_served_rps']:.3g}", st["grid"], f"{grid['wall_s'] / 60:.1f}"],
        ["tool", _cfg(t), "-" if t is None else f"{t['capacity']:.3g} req/s ({t['capacity_x']:.3g}x)",
         f"{cmp_['tool_best_served_rps']:.3g}", f"{st['tool_total']} ({st['tool_search']} + {st['tool_confirmation']})",
         f"{tool['wall_s'] / 60:.1f}"],
    ]  # fmt: skip
    m = tool["best_measured"]
    if m is not None and t is not None and m["trial"] != t["trial"]:  # what it measured, not what it exports
        rows.append(["tool, best measured (not exported)", _cfg(m), f"{m['capacity']:.3g} req/s ({m['capacity_x']:.3g}x)",
                     f"{m['served_rps'] or 0:.3g}", "-", "-"])  # fmt: skip
    headers = ["method", "best", "as it reports it", "served req/s there", "engine starts", "wall min"]
    ratio = "-" if cmp_["tool_vs_grid"] is None else f"{cmp_['tool_vs_grid']:.2f}x"

    def yes(flag: bool, strong: bool = False) -> str:
        return "yes" if flag else ("**no**" if strong else "no")

    return [
        c.md_table(headers, rows),
        f"\nTool against grid, served req/s at the level that held: {ratio}; at least the grid's within "
        f"{tolerance:.0%}: {yes(cmp_['tool_at_least_grid_within_tolerance'], True)}. At most half the grid's "
        f"engine starts: trials only {yes(cmp_['half_the_starts_search'])}, with the confirmation "
        f"{yes(cmp_['half_the_starts_total'])}.",
    ]


if __name__ == "__main__":
    sys.exit(main())
