"""Issue 31 on the lent H200 (vLLM 0.26.0 GPU build from ../shared/gpu, the 8B-shaped dummy Llama at
/root/m8b): max-num-seqs x max-num-batched-tokens as auto_tune.sh would grid it, a 10-minute study
on the same workload, and fp8 against bf16 KV on the long shared-document workload. Every part
fits one command of at most 9 minutes and resumes from its state under /root/i31 when a part
needs two calls; each writes JSON under $OUT.

    call 1 (.gpu/c1 .gpu/s):  bash .gpu/s/install.sh c1
    call 2 (.gpu/c2 .gpu/s):  bash .gpu/s/install.sh c2 && source .gpu/s/env.sh && python3 benchmarks/gpu/issue31_h200.py grid
    call 3 (.gpu/s):          source .gpu/s/env.sh && python3 benchmarks/gpu/issue31_h200.py grid     (the rest of the grid)
    call 4, 5 (.gpu/s):       source .gpu/s/env.sh && python3 benchmarks/gpu/issue31_h200.py study    (300 s of study each)
    call 6 (.gpu/s):          source .gpu/s/env.sh && python3 benchmarks/gpu/issue31_h200.py fp8

Add ``--dry-run`` to print the commands without running them, ``--cpu`` to run the same logic on
the CPU build with the tiny model (a smoke test; figures meaningless). Parts:

grid   each point (max-num-seqs S x max-num-batched-tokens B, vLLM's defaults for the rest): one
       engine start, one replay of the throughput workload (closed loop, concurrency 256), the SLO
       check (p90 TTFT) and the output throughput, through ``autotune run --n-trials 1`` (the
       baseline is the fixed flags, measured exactly as the study measures its trials).
study  ``autotune run`` on search_spaces/cuda.yaml, objective output_throughput, --slo ttft_p90,
       600 s of trial starts over two calls, at most GRID/3 engine starts (--total-trials).
fp8    ``autotune compare`` on rag_long.jsonl: bf16 KV at memory share 0.15 against fp8 at 0.15,
       then the KV-unconstrained reference (bf16 at 0.9) against fp8 at 0.15: p50 and p90 TTFT.
Grid and study run with --enforce-eager (starts of 25-40 s instead of 64-130 s: the grid fits
the device budget); the fp8 part with CUDA graphs on, as deployed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # trials() reads the studies with the tool's own record reader
SEQS = (64, 128, 256, 512)
BATCHED = (2048, 4096, 8192)
CONCURRENCY = 256
SLO_MS = 1000.0
STUDY_S = 600
TRIAL_ROOM_S = 150  # a grid point or a study trial: start, warm-up, replay, stop (eager)


class Run:
    """The settings of one call: GPU or CPU smoke, paths, the call's time budget."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.dry, self.cpu = a.dry_run, a.cpu
        self.t0, self.budget = time.monotonic(), float(os.environ.get("BUDGET", "530"))
        self.state = Path(os.environ.get("I31_STATE", "/tmp/i31" if self.cpu else "/root/i31"))
        self.out = Path(os.environ.get("OUT", "/tmp/out"))
        self.seqs, self.batched = (tuple(a.seqs) or SEQS), (tuple(a.batched) or BATCHED)
        self.concurrency, self.slo = a.concurrency, a.slo_ms
        if self.cpu:
            self.model = a.model or str(self.state / "tiny")
            self.launcher = None
            self.fixed = ["--enforce-eager", "--max-model-len=2048", "--kv-cache-memory-bytes=64M"]
        else:
            self.model = a.model or "/root/m8b"
            self.launcher = "python3 -m vllm.entrypoints.cli.main serve"
            self.fixed = ["--load-format=dummy", "--max-model-len=8192"]
        self.workload = self.state / "throughput.jsonl"
        self.slo_from, self.slo_path = a.slo_from_first, self.state / "slo.json"
        if self.slo_from and self.slo_path.exists():  # chosen by an earlier call's grid
            self.slo = float(json.loads(self.slo_path.read_text())["slo_ttft_p90_ms"])

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def base(self, study: str, *, eager: bool = True) -> list[str]:
        args = ["-m", self.model, "--studies-dir", str(self.state), "--study", study]
        args += ["--passes", "1", "--confirm-rounds", "0"]
        if self.launcher:
            args += ["--launcher", self.launcher, "--compile-cache", str(self.state / "cache")]
        fixed = [*self.fixed, *(["--enforce-eager"] if eager and not self.cpu else [])]
        return args + [f"--engine-arg={f}" for f in fixed]

    def autotune(self, args: list[str], log: Path) -> int:
        cmd = [sys.executable, "-m", "autotune", *args]
        print("$ " + shlex.join(cmd), flush=True)
        if self.dry:
            return 0
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        if not self.cpu:
            env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        with log.open("a") as fh:
            fh.write(f"\n$ {shlex.join(cmd)}\n")
            fh.flush()
            try:  # SIGINT first: the tool stops its engines on it
                p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
                return p.wait(timeout=max(30.0, self.left() - 10))
            except subprocess.TimeoutExpired:
                p.send_signal(2)
                return p.wait(timeout=60)

    def write(self, name: str, data: Any) -> None:
        """``name`` under $OUT (what comes back) and under the state folder (what the next call reads);
        the part's own log travels with it."""
        text = json.dumps(data, indent=2, default=str)
        for where in (self.out, self.state):
            where.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(text)
        for log in self.state.glob("*.log"):
            (self.out / log.name).write_text(log.read_text()[-200_000:])
        print(f"wrote {self.out / name}")


def trials(state: Path, study: str) -> list[dict[str, Any]]:
    """Every trial of a study: parameters, status, figures, start-up time (from its SQLite file)."""
    import optuna

    from autotune.study import read_record

    db = state / f"{study}.db"
    if not db.exists():
        return []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for s in optuna.get_all_study_summaries(f"sqlite:///{db}"):
        for t in optuna.load_study(study_name=s.study_name, storage=f"sqlite:///{db}").get_trials(
            deepcopy=False
        ):
            rec = read_record(t)
            f = rec.figures
            rows.append({
                "number": t.number, "state": t.state.name, "params": t.params, "status": rec.status.value,
                "failure": rec.failure, "reason": rec.reason, "started_engine": rec.startup_s is not None,
                "startup_s": rec.startup_s, "args": list(rec.rendered_args), "kv_tokens": rec.kv_tokens,
                **{k: (f.get(k) if f else None) for k in
                   ("ttft_p50", "ttft_p90", "output_throughput", "request_throughput", "tpot_p50")},
            })  # fmt: skip
    return rows


def meets(row: dict[str, Any], slo: float) -> bool:
    return row.get("ttft_p90") is not None and row["ttft_p90"] <= slo and bool(row.get("output_throughput"))


def ensure_inputs(r: Run) -> None:
    r.state.mkdir(parents=True, exist_ok=True)
    if not r.workload.exists():
        sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
        from throughput_workload import write_workload

        print(json.dumps(write_workload(r.workload, 16 if r.cpu else 1200)))
    if r.cpu and not Path(r.model).exists() and not r.dry:
        subprocess.run([sys.executable, "-m", "autotune", "tiny-model", r.model], check=True, cwd=ROOT)


def common(r: Run) -> list[str]:
    return ["-w", str(r.workload), "--concurrency", str(r.concurrency), "--objective", "output_throughput",
            "--slo", f"ttft_p90={r.slo:g}ms"]  # fmt: skip


def grid(r: Run) -> None:
    done = {(p["max_num_seqs"], p["max_num_batched_tokens"]): p for p in _load(r.state / "grid.json")}
    points = [(s, b) for s in r.seqs for b in r.batched]
    if r.slo_from:  # the SLO comes from the first point: the largest, the one auto_tune.sh starts from
        points.sort(reverse=True)
    for s, b in points:
        if (s, b) in done:
            continue
        if r.left() < TRIAL_ROOM_S and not r.dry:
            print(f"grid: {r.left():.0f} s left in this call; run `grid` again for the rest")
            return _grid_out(r, done)
        name = f"grid-s{s}-b{b}"
        t = time.monotonic()
        # 0: measured by an earlier call that ended before it wrote grid.json
        measured = not r.dry and any(x["state"] == "COMPLETE" for x in trials(r.state, name))
        rc = 0 if measured else -1
        args = ["run", *common(r), *r.base(name), f"--engine-arg=--max-num-seqs={s}",
                f"--engine-arg=--max-num-batched-tokens={b}", "--n-trials", "1", "--no-prior",
                "--out", str(r.state / f"{name}.yaml")]  # fmt: skip
        if rc != 0:
            rc = r.autotune(args, r.state / "grid.log")
        if rc == 130:  # the call's time ran out mid-point: measured again by the next call
            print(f"grid: {name} interrupted; run `grid` again")
            break
        rows = [] if r.dry else trials(r.state, name)
        point = {"max_num_seqs": s, "max_num_batched_tokens": b, "exit": rc,
                 "wall_s": round(time.monotonic() - t, 1), **(rows[-1] if rows else {})}  # fmt: skip
        if r.slo_from and not r.slo_path.exists() and point.get("ttft_p90"):
            r.slo = round(r.slo_from * float(point["ttft_p90"]), 1)
            r.slo_path.write_text(
                json.dumps({"slo_ttft_p90_ms": r.slo, "from": [s, b], "factor": r.slo_from})
            )
            print(
                f"grid: SLO p90 TTFT <= {r.slo:g} ms ({r.slo_from:g} x the first point's {point['ttft_p90']:.1f})"
            )
        point["meets_slo"] = meets(point, r.slo)
        done[(s, b)] = point
        if not r.dry:
            (r.state / "grid.json").write_text(json.dumps(list(done.values()), indent=2, default=str))
    _grid_out(r, done)


def _grid_out(r: Run, done: dict[tuple[int, int], dict[str, Any]]) -> None:
    for p in done.values():  # an SLO chosen from the first point holds for every point
        p["meets_slo"] = meets(p, r.slo)
    ok = [p for p in done.values() if p["meets_slo"]]
    best = max(ok, key=lambda p: p["output_throughput"], default=None)
    r.write("issue31_grid.json", {"slo_ttft_p90_ms": r.slo, "concurrency": r.concurrency,
                                  "points": list(done.values()), "engine_starts": len(done),
                                  "complete": len(done) == len(r.seqs) * len(r.batched), "best": best})  # fmt: skip


def _load(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() else []


def study(r: Run) -> None:
    used_path = r.state / "study-used-s"
    used = float(used_path.read_text()) if used_path.exists() else 0.0
    t = min(STUDY_S - used, r.left() - TRIAL_ROOM_S)
    max_starts = max(2, len(r.seqs) * len(r.batched) // 3)
    if t > 30 or r.dry:
        if not r.dry:
            used_path.write_text(str(used + t))
        args = ["run", *common(r), *r.base("thr-study"), "--space", str(ROOT / "search_spaces" / "cuda.yaml"),
                "--timeout", f"{t:.0f}", "--total-trials", str(max_starts), "--out", str(r.state / "study-best.yaml")]  # fmt: skip
        if r.cpu:
            args[args.index("--space") + 1] = str(ROOT / "search_spaces" / "cpu.yaml")
        r.autotune(args, r.state / "study.log")
    rows = [] if r.dry else trials(r.state, "thr-study")
    ok = [x for x in rows if meets(x, r.slo)]
    best = max(ok, key=lambda x: x["output_throughput"], default=None)
    g_path = r.state / "issue31_grid.json"  # $OUT is empty at every call: the state folder keeps it
    g = json.loads(g_path.read_text()) if g_path.exists() else {}
    gbest = (g.get("best") or {}).get("output_throughput")
    r.write("issue31_study.json", {
        "slo_ttft_p90_ms": r.slo, "study_seconds_used": used + max(t, 0), "trials": rows,
        "engine_starts": sum(1 for x in rows if x["started_engine"]), "grid_engine_starts": g.get("engine_starts"),
        "best": best, "grid_best_output_throughput": gbest,
        "study_over_grid": (best["output_throughput"] / gbest) if best and gbest else None,
    })  # fmt: skip


def fp8(r: Run) -> None:
    rag = ROOT / "benchmarks" / "gpu" / "rag_long.jsonl"
    util = "kv-cache-memory-bytes" if r.cpu else "gpu-memory-utilization"
    low, high = ("32M", "256M") if r.cpu else (0.15, 0.9)
    configs = {"bf16": {util: low}, "fp8": {util: low, "kv-cache-dtype": "fp8"}, "reference": {util: high}}
    for name, c in configs.items():
        (r.state / f"kv-{name}.yaml").write_text(json.dumps(c) + "\n")  # JSON is YAML
    fixed = [f for f in r.fixed if not f.startswith("--kv-cache-memory-bytes")]
    if (
        os.environ.get("I31_FP8_EAGER") == "1" and not r.cpu
    ):  # eager starts (25-40 s) when device time is short
        fixed.append("--enforce-eager")
    base = ["-m", r.model, "-w", str(rag if not r.cpu else r.workload), "--rounds", "1", "--passes", "1",
            *[f"--engine-arg={f}" for f in fixed]]  # fmt: skip
    if r.launcher:
        base += ["--launcher", r.launcher, "--compile-cache", str(r.state / "cache")]
    out: dict[str, Any] = {}
    arms = os.environ.get("I31_FP8_ARMS", "bf16,reference").split(",")  # e.g. reference: that compare only
    for label, a in (("fp8_vs_bf16", "bf16"), ("fp8_vs_reference", "reference")):
        if a not in arms:
            continue
        js = r.state / f"{label}.json"
        if not js.exists() and (r.left() > 2 * TRIAL_ROOM_S or r.dry):
            r.autotune(["compare", *base, "--baseline-config", str(r.state / f"kv-{a}.yaml"),
                        "--config", str(r.state / "kv-fp8.yaml"), "--log-dir", str(r.state / label),
                        "--json-out", str(js)], r.state / "fp8.log")  # fmt: skip
        out[label] = json.loads(js.read_text()) if js.exists() else None
    r.write("issue31_fp8.json", {"configs": configs, **out})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["grid", "study", "fp8"])
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--cpu", action="store_true", help="the CPU build and the tiny model (a smoke test)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seqs", type=int, nargs="*", default=[])
    ap.add_argument("--batched", type=int, nargs="*", default=[])
    ap.add_argument("--concurrency", type=int, default=CONCURRENCY)
    ap.add_argument("--slo-ms", type=float, default=SLO_MS)
    ap.add_argument("--slo-from-first", type=float, default=None, metavar="F",
                    help="the SLO is F x the p90 TTFT of the grid's first point (the largest), kept in the state folder")  # fmt: skip
    a = ap.parse_args()
    r = Run(a)
    ensure_inputs(r)
    {"grid": grid, "study": study, "fp8": fp8}[a.part](r)


if __name__ == "__main__":
    main()
