"""The H200 round-three figures of benchmarks/RESULTS.md, read from the files the runs brought back
(benchmarks/gpu/results/round3/, from benchmarks/gpu/round3_h200.sh and the comparison beside it),
so that every figure there comes from this command:

    python benchmarks/gpu/round3_report.py [--results benchmarks/gpu/results/round3]

Round two's exhaustive run (benchmarks/gpu/results/round2/long-grid.db: every configuration of the
long study's space, measured the same way) is the yardstick for the 10-minute long study.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import optuna
from round2_report import REPO, _cfg, _p90, _trials, _wall, study_table

POOL = "cpu_swap_space_gb"


def _kind(t: optuna.trial.FrozenTrial) -> str:
    a = t.user_attrs
    if a.get("duplicate_of") is not None:
        return "reused"
    if a.get("failure") == "prior":
        return "vetoed"
    return "launched"


def short_study(ts: list[optuna.trial.FrozenTrial]) -> None:
    launched = [t for t in ts if _kind(t) == "launched"]
    offload = [t for t in launched if (t.params.get(POOL) or 0) > 0]
    vetoed = [t for t in ts if _kind(t) == "vetoed"]
    reused = [t for t in ts if _kind(t) == "reused"]
    distinct = {json.dumps(t.params, sort_keys=True) for t in launched if t.params}
    best = min((t for t in launched if _p90(t) is not None), key=lambda t: _p90(t) or 1e9)
    print("## Short workload, ample KV: the study resumed in three calls (GPU 0)\n")
    print("\n".join(study_table(launched)))
    print(
        f"\n{len(ts)} trials in all: {len(launched)} launched an engine ({len(distinct)} distinct "
        f"configurations besides the baseline), {len(offload)} of them with a host pool "
        f"({', '.join(_cfg(t) for t in offload) or 'none'}); {len(vetoed)} offload proposals vetoed by the "
        f"prior before launch; {len(reused)} repeats of a measured configuration (measurement reused, no engine). "
        f"GPU time launched: {sum(_wall(t) for t in launched) / 60:.1f} min. Best: trial {best.number} "
        f"({_cfg(best)}) {_p90(best):.1f} ms."
    )


def long_study(ts: list[optuna.trial.FrozenTrial], grid: list[optuna.trial.FrozenTrial]) -> None:
    launched = [t for t in ts if _kind(t) == "launched"]
    print("\n## Long workload, scarce KV: a 10-minute study (600 s of trial starts over two calls, GPU 1)\n")
    print("\n".join(study_table(launched)))
    ok = [t for t in launched if _p90(t) is not None]
    best = min(ok, key=lambda t: _p90(t) or 1e9)
    t0 = min(t.datetime_start for t in ts if t.datetime_start)
    assert best.datetime_complete
    found = (best.datetime_complete - t0).total_seconds()
    g_ok = [t for t in grid if _p90(t) is not None]
    g_best = min(g_ok, key=lambda t: _p90(t) or 1e9)
    same = [t for t in grid if t.params == best.params]
    b, g = _p90(best), _p90(g_best)
    assert b and g
    print(
        f"\n{len(ts)} trials, {len(launched)} launched ({sum(_wall(t) for t in launched) / 60:.1f} GPU-min); "
        f"best: trial {best.number} ({_cfg(best)}) {b:.1f} ms, complete {found:.0f} s after the study's first start "
        f"(the wall clock includes the pause between the two calls). Round two's exhaustive run "
        f"({len(grid)} configurations, {sum(_wall(t) for t in grid) / 60:.1f} GPU-min): best {_cfg(g_best)} "
        f"{g:.1f} ms; this study's best is {100 * (b / g - 1):+.1f}% from it"
        + (
            f"; the exhaustive run measured this configuration at {_p90(same[0]):.1f} ms."
            if same and _p90(same[0])
            else "."
        )
    )
    base = next(t for t in ts if t.user_attrs.get("baseline"))
    print(f"\nbaseline (vLLM's defaults at memory share 0.15): {_p90(base):.1f} ms")


def reference(ref: list[optuna.trial.FrozenTrial], long_: list[optuna.trial.FrozenTrial], r: Path) -> None:
    base = next(t for t in long_ if t.user_attrs.get("baseline"))
    best = min((t for t in long_ if _p90(t) is not None), key=lambda t: _p90(t) or 1e9)
    rt = ref[0]
    d, b, x = _p90(base), _p90(best), _p90(rt)
    assert d and b and x
    a = rt.user_attrs
    print("\n## The KV-unconstrained reference (issue 18's gap), GPU 1\n")
    print(
        f"vLLM's defaults with the memory share left at 0.9 ({a.get('kv_tokens') or 0:,} KV tokens, prefix hits "
        f"{100 * (a.get('prefix_hit_rate') or 0):.0f}%): p90 {x:.1f} ms. Study: defaults at 0.15 {d:.1f} ms, best "
        f"{b:.1f} ms: {100 * (d - b) / (d - x):.1f}% of the defaults-to-reference gap closed (one measurement each)."
    )
    runs = []
    for name in ("cmp0.json", "cmp1.json"):
        p = r / name
        if p.exists():
            c = json.loads(p.read_text())
            runs.append((c["a"]["values"]["ttft_p90"][0], c["b"]["values"]["ttft_p90"][0]))
    if runs:
        print(
            "\n`autotune compare` of the exported best against the defaults (memory share 0.15), one round on "
            "each GPU at once: "
            + "; ".join(f"defaults {a:.1f} ms, best {b:.1f} ms ({b / a:.2f}x)" for a, b in runs)
        )
        for a_, b_ in runs:
            print(f"gap closed with this run's figures: {100 * (a_ - b_) / (a_ - x):.1f}%")


def relaunched_after_pruning(studies: dict[str, list[optuna.trial.FrozenTrial]]) -> None:
    """Launches of a configuration the pruner had already stopped in the same study."""
    again, launches, gpu_s, gpu_all = [], 0, 0.0, 0.0
    for name, ts in studies.items():
        pruned: set[str] = set()
        for t in ts:
            if _kind(t) != "launched":
                continue
            launches += 1
            gpu_all += _wall(t)
            key = json.dumps(t.params, sort_keys=True)
            if key in pruned:
                again.append(f"{name} #{t.number} ({_cfg(t)}: {t.user_attrs.get('status')})")
                gpu_s += _wall(t)
            if t.user_attrs.get("status") == "pruned":
                pruned.add(key)
    print("\n## Pruned configurations launched again\n")
    print(
        f"{len(again)} of {launches} launches re-ran a configuration already pruned in the same study: "
        f"{', '.join(again)}; {gpu_s / 60:.1f} of {gpu_all / 60:.1f} GPU-minutes ({100 * gpu_s / gpu_all:.0f}%)."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=REPO / "benchmarks/gpu/results/round3")
    args = p.parse_args()
    r = args.results
    short, long_, ref = _trials(r / "short.db"), _trials(r / "long.db"), _trials(r / "reference.db")
    grid = _trials(REPO / "benchmarks/gpu/results/round2/long-grid.db")
    short_study(short)
    long_study(long_, grid)
    reference(ref, long_, r)
    relaunched_after_pruning({"short": short, "long": long_})


if __name__ == "__main__":
    main()
