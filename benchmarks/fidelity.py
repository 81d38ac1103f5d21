"""Fidelity and cost of the measurement itself.

(a) client-side TTFT (what the tool optimises) against vLLM's own ``vllm:time_to_first_token_seconds``
    histogram for the same run: means from _sum/_count (exact), medians and p90 estimated from the
    buckets, made 1 ms wide with ``--custom-histogram-buckets``;
(b) how many requests/s ``autotune.bench.replay`` issues on schedule against a trivial local stub
    (benchmarks/_stub_server.py), and its scheduling lag percentiles (``RequestTiming.lag``: how late
    each request left against plan) at several target rates;
(c) per-trial overhead of a study (``TrialRecord.timings_s``: start-up, warm-up, measurement,
    teardown, against the trial's wall time) and the tuner process's peak RSS during the study.

Every engine is built by ``autotune.tuning.build_setup`` from the choices of ``autotune run``
(``_common.tuning_choices``): (c) runs a study exactly as ``run`` does, with its evaluator (memory
guard and vLLM's argument parser included); (a) starts one engine from the same launch spec.

    python benchmarks/fidelity.py                  # real vLLM for (a) and (c); about 4 min
    python benchmarks/fidelity.py --parts b        # the replayer against the stub only; about 1 min
    python benchmarks/fidelity.py --quick          # fake server, short runs
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from autotune.bench import ArrivalSpec, MetricsDelta, ReplayTarget, parse_metrics, replay, summarize, warm_up
from autotune.engine import EngineProcess
from autotune.engine._process import free_port
from autotune.space import EngineConfig
from autotune.study import (
    TrialHooks,
    TrialPolicy,
    TrialRecord,
    TrialReport,
    TrialStatus,
    ensure_baseline,
    load_or_create,
    run_study,
)
from autotune.tuning import TuningSetup, build_setup, plan_baseline
from autotune.workload import Workload, WorkloadRequest

TTFT = "vllm:time_to_first_token_seconds"
# 1 ms buckets to 300 ms, 5 ms to 1 s, 50 ms to 5 s: a median read from them is good to about 1 ms.
FINE_BUCKETS = (
    [round(0.001 * i, 3) for i in range(1, 301)]
    + [round(0.3 + 0.005 * i, 3) for i in range(1, 141)]
    + [round(1.0 + 0.05 * i, 3) for i in range(1, 81)]
)
RATES = (100, 250, 500, 1000)
TARGET_LAG_MS = 2.0


# -- (a) client TTFT vs vLLM's histogram ---------------------------------------------------------
def _buckets(text: str) -> dict[float, float]:
    """Cumulative bucket counts of the TTFT histogram, summed over label sets, keyed by ``le``."""
    out: dict[float, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == TTFT + "_bucket":
                out[float(s.labels["le"])] += s.value
    return dict(out)


def _quantile_from_buckets(cum: Mapping[float, float], q: float) -> float | None:
    """Linear interpolation inside the bucket holding the q-quantile (Prometheus' histogram_quantile)."""
    bounds = sorted(b for b in cum if np.isfinite(b))
    total = cum.get(float("inf"), 0.0)
    if not bounds or total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for b in bounds:
        if cum[b] >= rank:
            inside = cum[b] - below
            frac = (rank - below) / inside if inside else 0.0
            return lower + (b - lower) * frac
        lower, below = b, cum[b]
    return bounds[-1]


async def _ttft_run(engine: EngineProcess, setup: TuningSetup) -> dict[str, Any]:
    workload, names, metrics_url = (
        setup.workload,
        setup.engine.endpoints.metric_names,
        setup.engine.endpoints.metrics,
    )
    timeout = httpx.Timeout(600.0, connect=10.0)
    async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
        target = ReplayTarget(base_url=engine.base_url, model=engine.spec.model)
        chat = any(r.is_chat for r in workload.requests)
        await warm_up(client, target, count=setup.choices.warmup, chat=chat)
        before = (await client.get(engine.base_url + metrics_url)).text
        result = await replay(client, target, workload, setup.arrival, history=setup.choices.history)
        after = (await client.get(engine.base_url + metrics_url)).text
    figures = summarize(result.timings, result.duration_s)
    delta = MetricsDelta.between(parse_metrics(before, names), parse_metrics(after, names), names=names)
    b0, b1 = _buckets(before), _buckets(after)
    cum = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    client_ttft = np.array([t.ttft for t in result.timings if t.ttft is not None]) * 1000.0
    server = {
        "mean_ms": delta.server_ttft_mean_ms,
        "count": cum.get(float("inf")),
        "bucket_width_ms_at_median": None,
    }
    for name, q in (("p50_ms", 0.5), ("p90_ms", 0.9)):
        v = _quantile_from_buckets(cum, q)
        server[name] = v * 1000.0 if v is not None else None
    client = {
        "mean_ms": float(client_ttft.mean()),
        "p50_ms": float(np.percentile(client_ttft, 50)),
        "p90_ms": float(np.percentile(client_ttft, 90)),
        "count": int(client_ttft.size),
    }
    # The client's times through the server's estimator (same buckets, same interpolation), so that a
    # difference at a sparse tail is not a difference between two quantile definitions.
    bounds = sorted(cum)
    client_cum = {b: float(np.sum(client_ttft <= b * 1000.0)) for b in bounds}
    for name, q in (("p50", 0.5), ("p90", 0.9)):
        v = _quantile_from_buckets(client_cum, q)
        client[f"{name}_bucketed_ms"] = v * 1000.0 if v is not None else None
    diff = {
        k: (client[k] - server[k]) if server.get(k) is not None else None
        for k in ("mean_ms", "p50_ms", "p90_ms")
    }
    for k in ("p50", "p90"):
        sv, cv = server.get(f"{k}_ms"), client.get(f"{k}_bucketed_ms")
        diff[f"{k}_same_estimator_ms"] = cv - sv if sv is not None and cv is not None else None
    return {"client": client, "server": server, "client_minus_server_ms": diff, "failed": figures.failed}


def part_a(args: Any, model: str) -> dict[str, Any]:
    work = args.work_dir / f"fidelity-a-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload("rag.jsonl", quick=args.quick, work_dir=work)
    buckets = json.dumps({"time_to_first_token": FINE_BUCKETS}, separators=(",", ":"))
    extra = ["--custom-histogram-buckets=" + buckets]  # --x=VALUE keeps the JSON whole
    choices = c.tuning_choices(
        model, wl_path, quick=args.quick, speed=20.0 if args.quick else 1.0, extra_args=extra
    )
    # The tuned-looking configuration (KV to spare): TTFT then is the request's own, not queueing.
    rendered = EngineConfig.recorded(["--kv-cache-memory-bytes", "128M"])
    load = {"start": c.load_average()}
    with build_setup(choices) as setup:
        setup.check_fixed_flags()
        engine = setup.engine.process(setup.launch, rendered, work / "fidelity-a.log")
        try:
            engine.start()
            engine.wait_healthy()
            out = asyncio.run(_ttft_run(engine, setup))
        finally:
            engine.stop()
    load["end"] = c.load_average()
    return {
        "workload": "examples/rag.jsonl",
        "requests": len(setup.workload),
        "arrival": setup.arrival.describe(),
        **out,
        "load_average": load,
    }


# -- (b) the replayer against a stub -------------------------------------------------------------
def _stub_workload(rate: float, duration_s: float) -> Workload:
    n = max(int(rate * duration_s), 1)
    reqs = tuple(
        WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=1, prompt="hi", timestamp=i / rate)
        for i in range(n)
    )
    return Workload(path=Path(f"<stub {rate:g}/s>"), requests=reqs)


async def _replay_stub(base_url: str, workload: Workload) -> dict[str, Any]:
    # The client settings of a trial (VllmEvaluator): no connection limit, 256 kept alive.
    timeout = httpx.Timeout(60.0, connect=10.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    async with httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits) as client:
        target = ReplayTarget(base_url=base_url, model="stub")
        await warm_up(client, target, count=2, chat=False)
        result = await replay(client, target, workload, ArrivalSpec(mode="timestamps"))
    lags = np.array([t.lag for t in result.timings]) * 1000.0
    sent = np.array([t.sent for t in result.timings])
    ok = [t for t in result.timings if t.ok]
    ttft = np.array([t.ttft for t in ok]) * 1000.0 if ok else np.array([np.nan])
    planned_span = float(workload.requests[-1].timestamp or 0.0)
    span = float(sent.max() - sent.min()) if sent.size > 1 else 0.0
    return {
        "requests": len(result.timings),
        "ok": len(ok),
        "issue_rate_per_s": (len(result.timings) - 1) / span if span else None,
        "planned_span_s": planned_span,
        "actual_span_s": span,
        "lag_ms": {f"p{q}": float(np.percentile(lags, q)) for q in (50, 90, 99)} | {"max": float(lags.max())},
        "on_time_share": float(np.mean(lags <= TARGET_LAG_MS)),
        "errors": Counter((t.error or "")[:120] for t in result.timings if t.error).most_common(3),
        "stub_ttft_ms": {"p50": float(np.percentile(ttft, 50)), "p99": float(np.percentile(ttft, 99))},
    }


def part_b(args: Any) -> dict[str, Any]:
    port = free_port()
    stub = subprocess.Popen(
        [sys.executable, str(c.REPO / "benchmarks" / "_stub_server.py"), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    run: Callable[[Coroutine[Any, Any, dict[str, Any]]], dict[str, Any]] = asyncio.run
    if (
        args.loop == "uvloop"
    ):  # what the replayer would gain from a faster event loop (the tool uses asyncio's)
        import uvloop

        run = uvloop.run
    load = {"start": c.load_average()}
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or stub.poll() is not None:
                raise RuntimeError(f"stub server did not start: {stub.stdout.read() if stub.stdout else ''}")
            time.sleep(0.1)
        rates: dict[str, Any] = {}
        for rate in args.rates:
            rates[str(rate)] = run(_replay_stub(base, _stub_workload(rate, args.stub_seconds)))
            c.log.info("stub %s req/s: %s", rate, rates[str(rate)]["lag_ms"])
    finally:
        stub.terminate()
        try:
            stub.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stub.kill()
    load["end"] = c.load_average()
    on_time = [
        int(r) for r, v in rates.items() if v["lag_ms"]["p99"] <= TARGET_LAG_MS and v["ok"] == v["requests"]
    ]
    return {
        "seconds_per_rate": args.stub_seconds,
        "event_loop": args.loop,
        "rates": rates,
        "max_rate_on_time": max(on_time) if on_time else None,
        "target": f"lag p99 <= {TARGET_LAG_MS:g} ms",
        "load_average": load,
    }


# -- (c) per-trial overhead and the tuner's memory -----------------------------------------------
class _PeakRss:
    """Samples this process's RSS every ``interval`` seconds in a thread; ``peak`` in bytes."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._proc = psutil.Process()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def part_c(args: Any, model: str) -> dict[str, Any]:
    work = args.work_dir / f"fidelity-c-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    wl_path = c.example_workload("rag.jsonl", quick=args.quick, work_dir=work)
    choices = c.tuning_choices(
        model, wl_path, quick=args.quick, speed=20.0 if args.quick else 1.0, min_throughput_ratio=0.5
    )
    load = {"start": c.load_average()}
    rss_before = psutil.Process().memory_info().rss
    started: dict[int, float] = {}
    walls: dict[int, float] = {}
    records: dict[int, TrialRecord] = {}

    def on_start(number: int, baseline: bool, params: Mapping[str, Any]) -> None:
        started[number] = time.monotonic()

    def on_done(rep: TrialReport) -> None:
        walls[rep.number] = time.monotonic() - started[rep.number]
        records[rep.number] = rep.record

    with _PeakRss() as rss, build_setup(choices) as setup:
        t0 = time.monotonic()
        # As `autotune run`: vLLM's own parser checks the fixed flags before the study, which starts
        # it here, not inside trial 0, so that its cost is seen apart.
        setup.check_fixed_flags()
        checker_s = time.monotonic() - t0
        study = load_or_create(f"sqlite:///{work / 'study.db'}", "fidelity-c", setup.objective, 0)
        plan = plan_baseline(setup)
        ensure_baseline(study, dict(plan.reference) if plan.reference is not None else None)
        # Pinned, startable configurations (an infeasible draw would measure a failed start instead).
        for kv, mnbt, bs in ((64, 1024, 64), (128, 2048, 32))[: args.overhead_trials - 1]:
            study.enqueue_trial(
                {
                    "kv_cache_memory_bytes": kv,
                    "max_num_batched_tokens": mnbt,
                    "block_size": bs,
                    "enable_prefix_caching": True,
                }
            )
        run_study(
            study,
            TrialPolicy(space=setup.space, objective=setup.objective),
            setup.evaluator(work),
            args.overhead_trials,
            TrialHooks(on_start=on_start, on_done=on_done),
        )
        study_s = time.monotonic() - t0
        checked = setup.checker() is not None
    load["end"] = c.load_average()
    trials = []
    for n in sorted(walls):
        ts = dict(records[n].timings_s)
        wall = walls[n]
        vllm = ts.get("startup", 0.0) + ts.get("measure", 0.0)
        trials.append(
            {
                "number": n,
                "status": records[n].status.value,
                "wall_s": wall,
                "timings_s": ts,
                "other_s": wall - sum(ts.values()),
                "measure_share": ts.get("measure", 0.0) / wall if wall else None,
                "overhead_vs_startup_and_measure": (wall - vllm) / vllm if vllm else None,
            }
        )
    ok = [t for t in trials if t["status"] == TrialStatus.OK.value]
    tot = {
        k: sum(t["timings_s"].get(k, 0.0) for t in ok) for k in ("startup", "warmup", "measure", "teardown")
    }
    wall_ok = sum(t["wall_s"] for t in ok)
    core = tot["startup"] + tot["measure"]
    return {
        "trials": trials,
        "totals_s": {**tot, "wall": wall_ok, "other": wall_ok - sum(tot.values())},
        "measure_share": tot["measure"] / wall_ok if wall_ok else None,
        "overhead_vs_startup_and_measure": (wall_ok - core) / core if core else None,
        "study_overhead_vs_startup_and_measure": (study_s - core) / core if core else None,
        "arg_checker_start_s": checker_s if checked else None,
        "study_wall_s": study_s,
        "peak_rss_mib": rss.peak / 2**20,
        "rss_before_study_mib": rss_before / 2**20,
        "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "load_average": load,
    }


# -- output ---------------------------------------------------------------------------------------
def _f(v: float | None, digits: int = 1, unit: str = "") -> str:
    return f"{v:.{digits}f}{unit}" if v is not None else "-"


def markdown(result: Mapping[str, Any]) -> str:
    parts = [c.md_header("Fidelity and overhead (fidelity.py)", result["env"], result["load_average"])]
    a = result.get("a")
    if a:
        cl, sv, d = a["client"], a["server"], a["client_minus_server_ms"]
        parts.append(
            f"**(a) client TTFT vs vLLM's histogram** ({a['workload']}, {a['requests']} requests, "
            f"{a['arrival']}; {cl['count']} requests timed by the client, {_f(sv['count'], 0)} by vLLM; "
            f"load {a['load_average']['start']} -> {a['load_average']['end']})\n"
        )
        parts.append(
            c.md_table(
                ["TTFT", "client (ms)", "vLLM (ms)", "client - vLLM (ms)"],
                [
                    [
                        "mean (vLLM: _sum/_count)",
                        _f(cl["mean_ms"], 2),
                        _f(sv["mean_ms"], 2),
                        _f(d["mean_ms"], 2),
                    ],
                    [
                        "median (vLLM: 1 ms buckets)",
                        _f(cl["p50_ms"], 2),
                        _f(sv["p50_ms"], 2),
                        _f(d["p50_ms"], 2),
                    ],
                    [
                        "p90 (vLLM: 1 ms buckets)",
                        _f(cl["p90_ms"], 2),
                        _f(sv["p90_ms"], 2),
                        _f(d["p90_ms"], 2),
                    ],
                    [
                        "median, both from the same 1 ms buckets",
                        _f(cl.get("p50_bucketed_ms"), 2),
                        _f(sv["p50_ms"], 2),
                        _f(d.get("p50_same_estimator_ms"), 2),
                    ],
                    [
                        "p90, both from the same 1 ms buckets",
                        _f(cl.get("p90_bucketed_ms"), 2),
                        _f(sv["p90_ms"], 2),
                        _f(d.get("p90_same_estimator_ms"), 2),
                    ],
                ],
            )
        )
        parts.append("")
    b = result.get("b")
    if b:
        parts.append(
            f"**(b) replayer against a local stub** ({b.get('event_loop', 'asyncio')} event loop, "
            f"{b['seconds_per_rate']:g} s per rate, evenly spaced "
            f"arrivals, one-token SSE answers; load {b['load_average']['start']} -> {b['load_average']['end']}). "
            f"Highest rate with lag p99 <= {TARGET_LAG_MS:g} ms and no failed request: "
            f"{b['max_rate_on_time'] or 'none of those tried'} req/s.\n"
        )
        rows = [
            [
                r,
                v["requests"],
                _f(v["issue_rate_per_s"], 0),
                _f(v["lag_ms"]["p50"], 2),
                _f(v["lag_ms"]["p90"], 2),
                _f(v["lag_ms"]["p99"], 2),
                _f(v["lag_ms"]["max"], 1),
                f"{v['on_time_share']:.1%}",
                f"{v['requests'] - v['ok']}",
                _f(v["stub_ttft_ms"]["p50"], 2),
            ]
            for r, v in b["rates"].items()
        ]
        parts.append(
            c.md_table(
                [
                    "target req/s",
                    "requests",
                    "issued req/s",
                    "lag p50 ms",
                    "p90",
                    "p99",
                    "max",
                    "lag <= 2 ms",
                    "failed",
                    "TTFT p50 ms",
                ],
                rows,
            )
        )
        parts.append("")
    cc = result.get("c")
    if cc:
        t = cc["totals_s"]
        parts.append(
            f"**(c) per-trial overhead** ({len(cc['trials'])} trials of a study; load "
            f"{cc['load_average']['start']} -> {cc['load_average']['end']}). Share of the trial spent "
            f"measuring: {_f(cc['measure_share'] and cc['measure_share'] * 100, 1, '%')}; time beyond vLLM "
            f"start-up + measurement: {_f(cc['overhead_vs_startup_and_measure'] and cc['overhead_vs_startup_and_measure'] * 100, 1, '%')} "
            f"of it per trial, {_f(cc['study_overhead_vs_startup_and_measure'] and cc['study_overhead_vs_startup_and_measure'] * 100, 1, '%')} "
            f"for the whole study (argument checker, storage, sampler included). Tuner peak RSS during the study {cc['peak_rss_mib']:.0f} MiB (ru_maxrss "
            f"{cc['ru_maxrss_mib']:.0f} MiB). vLLM's argument checker (a worker process importing vLLM, started "
            f"once per study, before trial 0) took {_f(cc['arg_checker_start_s'], 1, ' s')} to start: not in the "
            f"trial figures; {_f(cc['study_wall_s'], 0, ' s')} for the whole study.\n"
        )
        rows = [
            [
                tr["number"],
                tr["status"],
                _f(tr["wall_s"], 1),
                *(_f(tr["timings_s"].get(k), 2) for k in ("startup", "warmup", "measure", "teardown")),
                _f(tr["other_s"], 2),
                _f(tr["measure_share"] and tr["measure_share"] * 100, 1, "%"),
            ]
            for tr in cc["trials"]
        ]
        rows.append(
            [
                "all ok",
                "",
                _f(t["wall"], 1),
                *(_f(t[k], 2) for k in ("startup", "warmup", "measure", "teardown")),
                _f(t["other"], 2),
                "",
            ]
        )
        parts.append(
            c.md_table(
                [
                    "trial",
                    "status",
                    "wall s",
                    "start-up",
                    "warm-up",
                    "measure",
                    "teardown",
                    "other",
                    "measuring",
                ],
                rows,
            )
        )
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    p = c.base_parser(__doc__.splitlines()[0])
    p.add_argument(
        "--parts",
        default="c,a,b",
        help="which parts, in order (default c,a,b: (c) first, so "
        "the RSS of the study is not inflated by the stub run)",
    )
    p.add_argument("--rates", default=",".join(map(str, RATES)), help="target rates for (b), req/s")
    p.add_argument(
        "--stub-seconds", type=float, help="seconds of arrivals per rate in (b) (default 5; quick 0.5)"
    )
    p.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="event loop of the replay in (b) (the tool uses asyncio's; uvloop shows what a faster loop gives)",
    )
    p.add_argument("--overhead-trials", type=int, default=3, help="trials of the study in (c) (1-3)")
    args = p.parse_args(argv)
    args.rates = [float(r) if "." in r else int(r) for r in args.rates.split(",")]
    args.stub_seconds = args.stub_seconds or (0.5 if args.quick else 5.0)
    args.overhead_trials = max(1, min(args.overhead_trials, 3))
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    c.setup_logging(args.verbose)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    env = c.environment()
    model = c.bench_model(args.models_dir) if {"a", "c"} & set(parts) else ""
    load_start = c.load_average()
    t0 = time.monotonic()
    result: dict[str, Any] = {"benchmark": "fidelity", "quick": args.quick, "env": env, "model": model}
    walls: dict[str, float] = {}
    for part in parts:
        t = time.monotonic()
        result[part] = {
            "a": lambda: part_a(args, model),
            "b": lambda: part_b(args),
            "c": lambda: part_c(args, model),
        }[part]()
        walls[part] = time.monotonic() - t
    result["load_average"] = {"start": load_start, "end": c.load_average()}
    result["wall_s"] = {**walls, "total": time.monotonic() - t0}
    c.write_json(args.json_out, result)
    print(markdown(result))
    print(f"\nwall time: {result['wall_s']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
