"""Overlapped starts on the lent H200 (issue 31, item 4): trials per GPU-hour before and after, and
the A/B of the replay's figures (do they move when the next engine starts beside the replay?).

The same engine configuration every trial (``space_h200_seed.yaml``: only vLLM's sampling seed is
tuned), memory share fixed at 0.3 so two engines fit the GPU, the 8B-shaped dummy Llama, eager
starts, the throughput workload (1,200 short requests, closed loop at concurrency 256). Two studies
of N trials each, one command each:

    off  ``autotune run --n-trials N``                      every start waits for the trial before
    on   ``autotune run --n-trials N --overlap-starts``     each next engine starts during the replay

then ``report`` (no GPU) puts both side by side: wall time and trials per GPU-hour, each trial's
start-up (and how much of it was hidden), and TTFT p50/p90 and output throughput of the trials that
replayed alone against those that replayed while the next engine started.

    call 1 (.gpu/c1 .gpu/s):  bash .gpu/s/install.sh c1
    call 2 (.gpu/c2 .gpu/s):  bash .gpu/s/install.sh c2 && source .gpu/s/env.sh && python3 benchmarks/gpu/overlap_h200.py off
    call 3 (.gpu/s):          source .gpu/s/env.sh && python3 benchmarks/gpu/overlap_h200.py on
Add ``--cpu`` for the same logic on the CPU build with the tiny model (a smoke test; the figures
mean nothing there: both engines share the same two cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from issue31_h200 import Run, ensure_inputs, trials  # noqa: E402

N_TRIALS = 4
SHARE = 0.3


def _args(r: Run, name: str, n: int, overlap: bool) -> list[str]:
    args = ["run", "-w", str(r.workload), "--concurrency", str(r.concurrency), "--objective", "ttft_p90",
            *r.base(name), "--space", str(HERE / "space_h200_seed.yaml"), "--n-trials", str(n),
            "--no-prior", "--no-prune", "--out", str(r.state / f"{name}.yaml")]  # fmt: skip
    if r.cpu:  # the tiny model on the CPU build: a seed space of its own platform
        space = r.state / "space_cpu_seed.yaml"
        text = (HERE / "space_h200_seed.yaml").read_text().replace("platform: cuda", "platform: cpu")
        space.write_text(text)
        args[args.index("--space") + 1] = str(space)
    else:
        args.append(f"--engine-arg=--gpu-memory-utilization={SHARE}")
    return args + (["--overlap-starts"] if overlap else [])


def study(r: Run, mode: str, n: int) -> None:
    name = f"overlap-{mode}"
    t0 = time.monotonic()
    rc = r.autotune(_args(r, name, n, mode == "on"), r.state / f"{name}.log")
    wall = time.monotonic() - t0
    r.write(f"{name}.json", {"mode": mode, "exit": rc, "wall_s": round(wall, 1), "n_trials": n,
                             "trials": [] if r.dry else _rows(r.state, name)})  # fmt: skip


def _rows(state: Path, name: str) -> list[dict[str, Any]]:
    import optuna

    from autotune.study import read_record

    rows = trials(state, name)
    db = state / f"{name}.db"
    st = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    for row, t in zip(rows, st.get_trials(deepcopy=False), strict=False):
        rec = read_record(t)
        row["timings_s"] = dict(rec.timings_s)
        row["notes"] = list(rec.notes)
        row["start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["complete"] = t.datetime_complete.isoformat() if t.datetime_complete else None
    return rows


def _stats(rows: list[dict[str, Any]], key: str) -> dict[str, float | int | None]:
    xs = [float(x[key]) for x in rows if x.get(key) is not None]
    if not xs:
        return {"n": 0, "mean": None, "cv": None}
    mean = statistics.fmean(xs)
    cv = statistics.stdev(xs) / mean if len(xs) > 1 and mean else None
    return {"n": len(xs), "mean": round(mean, 2), "cv": round(cv, 4) if cv is not None else None}


def report(out: Path, state: Path) -> dict[str, Any]:
    off = json.loads((state / "overlap-off.json").read_text())
    on = json.loads((state / "overlap-on.json").read_text())
    alone = [x for x in off["trials"] if x["status"] == "ok"]
    # in the "on" study every trial but the last replayed while the next engine started
    beside = [x for x in on["trials"][:-1] if x["status"] == "ok"]
    keys = ("ttft_p50", "ttft_p90", "output_throughput", "tpot_p50", "kv_tokens")
    data = {
        "per_gpu_hour": {m["mode"]: round(len(m["trials"]) / (m["wall_s"] / 3600), 1) for m in (off, on)},
        "wall_s": {"off": off["wall_s"], "on": on["wall_s"]},
        "startup_s": {m["mode"]: [x["startup_s"] for x in m["trials"]] for m in (off, on)},
        "startup_hidden_s": [x.get("timings_s", {}).get("startup_overlapped") for x in on["trials"]],
        "alone": {k: _stats(alone, k) for k in keys},
        "beside_a_start": {k: _stats(beside, k) for k in keys},
    }
    for k in keys:
        a, b = data["alone"][k]["mean"], data["beside_a_start"][k]["mean"]
        data.setdefault("ratio_beside_over_alone", {})[k] = round(b / a, 4) if a and b else None
    (out / "issue31_overlap.json").write_text(json.dumps(data, indent=2))
    print(json.dumps(data, indent=2))
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["off", "on", "report"])
    ap.add_argument("--n-trials", type=int, default=N_TRIALS)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--model", default=None)
    ap.add_argument("--concurrency", type=int, default=256)
    a = ap.parse_args()
    a.seqs, a.batched, a.slo_ms = [], [], 0.0
    r = Run(a)
    if a.part == "report":
        report(r.out, r.state)
        return
    ensure_inputs(r)
    study(r, a.part, a.n_trials)


if __name__ == "__main__":
    main()
