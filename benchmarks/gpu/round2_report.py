"""The H200 round-two figures of benchmarks/RESULTS.md, read from the files the runs brought back
(benchmarks/gpu/results/round2/: the studies' SQLite files and the comparison's JSON), so that every
figure there comes from this command:

    python benchmarks/gpu/round2_report.py [--results benchmarks/gpu/results/round2]

Round one's study (benchmarks/gpu/results/study-call/, --enforce-eager) is read for trials per
GPU-hour before.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _trials(db: Path, name: str | None = None) -> list[optuna.trial.FrozenTrial]:
    url = f"sqlite:///{db}"
    name = name or optuna.get_all_study_summaries(url)[0].study_name
    return [t for t in optuna.load_study(study_name=name, storage=url).get_trials() if t.datetime_complete]


def _wall(t: optuna.trial.FrozenTrial) -> float:
    assert t.datetime_start and t.datetime_complete
    return (t.datetime_complete - t.datetime_start).total_seconds()


def _span(ts: list[optuna.trial.FrozenTrial]) -> float:
    start = min(t.datetime_start for t in ts if t.datetime_start)
    end = max(t.datetime_complete for t in ts if t.datetime_complete)
    return (end - start).total_seconds()


def _cfg(t: optuna.trial.FrozenTrial) -> str:
    if t.user_attrs.get("baseline"):
        return "defaults (baseline)"
    short = {"max_num_batched_tokens": "mnbt", "cpu_swap_space_gb": "pool GiB", "block_size": "block"}
    return ", ".join(f"{short.get(k, k)} {v}" for k, v in t.params.items())


def _p90(t: optuna.trial.FrozenTrial) -> float | None:
    v = t.user_attrs.get("ttft_p90_ms")
    return None if v is None or t.user_attrs.get("status") != "ok" else float(v)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def study_table(ts: list[optuna.trial.FrozenTrial]) -> list[str]:
    rows = [
        "| # | configuration | status | p90 TTFT ms | prefix hit (pred.) | host hit | start s (compile, kv) | trial s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in ts:
        a = t.user_attrs
        tm = a.get("timings_s") or {}
        pred = (a.get("predicted") or {}).get("prefix_hit_with_pool") or (a.get("predicted") or {}).get(
            "prefix_hit_gpu"
        )
        p90 = _p90(t)
        status = a.get("status")
        if status == "pruned":
            status = f"pruned ({(a.get('reason') or '').split(' is ')[0].replace('pruned ', '')})"
        rows.append(
            f"| {t.number} | {_cfg(t)} | {status} | {'-' if p90 is None else f'{p90:.1f}'} | "
            f"{_pct(a.get('prefix_hit_rate'))} ({_pct(pred)}) | {_pct(a.get('host_hit_rate'))} | "
            f"{tm.get('startup', 0):.0f} ({tm.get('startup_compile', 0):.0f}, {tm.get('startup_kv_profile', 0):.0f}) | "
            f"{_wall(t):.0f} |"
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=REPO / "benchmarks/gpu/results/round2")
    args = p.parse_args()
    r = args.results
    long_, short, grid = _trials(r / "long.db"), _trials(r / "short.db"), _trials(r / "long-grid.db")

    print("## Long workload, 8-minute study (GPU 0)\n")
    print("\n".join(study_table(long_)))
    print("\n## Short workload, 4-minute study (GPU 1)\n")
    print("\n".join(study_table(short)))
    offload = [t for t in short if (t.params.get("cpu_swap_space_gb") or 0) > 0]
    print(f"\ntrials with a host pool: {len(offload)} of {len(short)}")

    print("\n## Exhaustive run of the long study's space (GPUs 0,1, then GPU 1)\n")
    by_value = sorted(grid, key=lambda t: _p90(t) or 1e9)
    print("\n".join(study_table(by_value)).replace("| # |", "| # |", 1))
    ok = [t for t in grid if _p90(t) is not None]
    best_grid = min(ok, key=lambda t: _p90(t) or 1e9)
    ok_long = [t for t in long_ if _p90(t) is not None]
    best_study = min(ok_long, key=lambda t: _p90(t) or 1e9)
    same = next(t for t in grid if t.params == best_study.params)
    b, g, s = _p90(best_study), _p90(best_grid), _p90(same)
    assert b and g and s
    t0 = min(t.datetime_start for t in long_ if t.datetime_start)
    assert best_study.datetime_complete
    found_s = (best_study.datetime_complete - t0).total_seconds()
    grid_gpu_s = sum(_wall(t) for t in grid)
    print(
        f"\nstudy best: trial {best_study.number} ({_cfg(best_study)}) {b:.1f} ms, found {found_s:.0f} s into the study; "
        f"exhaustive best: trial {best_grid.number} ({_cfg(best_grid)}) {g:.1f} ms -> the study's best is "
        f"{100 * (b / g - 1):.1f}% above it; the exhaustive run measured the study's pick at {s:.1f} ms "
        f"({100 * (s / g - 1):.1f}% above). The exhaustive run took {grid_gpu_s / 60:.1f} GPU-minutes "
        f"({len(grid)} trials)."
    )

    # trials per GPU-hour: round one (eager) against round two (CUDA graphs + shared compile cache)
    one = _trials(REPO / "benchmarks/gpu/results/study-call/studies/h200.db")
    print("\n## Trials per GPU-hour\n")
    print("| run | trials | GPU s | trials per GPU-hour | mean trial s | mean start-up s |")
    print("|---|---|---|---|---|---|")
    for label, ts in (
        ("round one study (--enforce-eager)", one),
        ("round two long study (graphs on, shared cache)", long_),
        ("round two short study", short),
        ("round two exhaustive run (per GPU)", grid),
    ):
        busy = sum(_wall(t) for t in ts)
        starts = [(t.user_attrs.get("timings_s") or {}).get("startup") or 0 for t in ts]
        print(
            f"| {label} | {len(ts)} | {busy:.0f} | {3600 * len(ts) / busy:.1f} | {busy / len(ts):.0f} | "
            f"{statistics.mean(starts):.0f} |"
        )

    # two GPUs at once: the exhaustive run's first part (both workers), against one-GPU runs
    both = [t for t in grid if t.number <= 9]
    span2 = _span(both)
    per_gpu = {g: [t for t in both if t.user_attrs.get("gpus") == [g]] for g in (0, 1)}
    print("\n## One GPU against two\n")
    print("| run | GPUs | trials | wall s (first start to last end) | trials per wall-minute |")
    print("|---|---|---|---|---|")
    rate2 = len(both) / span2 * 60
    print(f"| exhaustive run, trials 0-9 | 0,1 | {len(both)} | {span2:.0f} | {rate2:.2f} |")
    for label, ts in (
        ("long study", long_),
        ("exhaustive run, trials 10-12", [t for t in grid if t.number > 9]),
    ):
        span1 = _span(ts)
        print(
            f"| {label} | 1 | {len(ts)} | {span1:.0f} | {len(ts) / span1 * 60:.2f} ({rate2 / (len(ts) / span1 * 60):.2f}x) |"
        )
    for g, ts in per_gpu.items():
        busy = sum(_wall(t) for t in ts)
        print(
            f"\nGPU {g}: {len(ts)} trials, busy {busy:.0f} s of the {span2:.0f} s ({100 * busy / span2:.0f}%)"
        )
    own = sum(_wall(t) for t in both)
    print(
        f"\nthe 10 trials' own durations add up to {own:.0f} s: one GPU would take that long, {own / span2:.2f}x the two-GPU wall"
    )

    # host-pool size against start-up and teardown
    print("\n## Host pool size against start-up (exhaustive run)\n")
    print(
        "| pool GiB | trials | KV-profile s (mean) | start-up s (mean) | teardown s (mean) | p90 TTFT ms (range) |"
    )
    print("|---|---|---|---|---|---|")
    for pool in (0, 16, 32, 64):
        ts = [
            t for t in grid if not t.user_attrs.get("baseline") and t.params.get("cpu_swap_space_gb") == pool
        ]
        tm = [t.user_attrs.get("timings_s") or {} for t in ts]
        vals = [v for v in (_p90(t) for t in ts) if v is not None]
        print(
            f"| {pool} | {len(ts)} | {statistics.mean(x.get('startup_kv_profile', 0) for x in tm):.1f} | "
            f"{statistics.mean(x.get('startup', 0) for x in tm):.0f} | {statistics.mean(x.get('teardown', 0) for x in tm):.1f} | "
            f"{min(vals):.1f}-{max(vals):.1f} |"
        )

    cmp_path = r / "long-compare.json"
    if cmp_path.exists():
        d = json.loads(cmp_path.read_text())
        print("\n## Best against the defaults, alternating (GPU 0)\n")
        for arm in ("a", "b"):
            vals = [round(v, 1) for v in d[arm]["values"]["ttft_p90"]]
            p50 = [round(v, 1) for v in d[arm]["values"]["ttft_p50"]]
            print(f"- {d[arm]['name']}: p90 TTFT per run {vals} ms (p50 {p50})")
    defaults = [_p90(t) for t in (*long_, *grid) if t.user_attrs.get("baseline")]
    print(f"\nvLLM defaults as study baselines: p90 {[round(v, 1) for v in defaults if v]}")


if __name__ == "__main__":
    main()
