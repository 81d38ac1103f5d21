"""The tool's replayer against ``vllm bench serve`` on one real server, alternately (issue 36/40).

Both clients send the same requests, in the same order, at the same arrival times, to one running
vLLM server; its prefix cache is emptied before every run (``POST /reset_prefix_cache``, which needs
``VLLM_SERVER_DEV_MODE=1``: the server this script starts has it). Two arrival patterns:

- closed loop at ``--concurrency`` (bench: ``--max-concurrency C --request-rate inf``);
- ``closed-shuffled``: the same, but bench shuffles its dataset as it does by default (the outside
  measurement of issue 36 ran it so), while the tool keeps the file's order;
- Poisson at ``--rate`` with ``--seed``: bench draws its gaps itself (``np.random.seed(seed)``, a
  gamma draw per request, rescaled to ``n / rate`` seconds); this script draws the same gaps and
  writes them as the workload's timestamps for the tool, then checks bench's recorded send times
  against them (``schedule_max_diff_ms`` in the output).

Bench runs with ``--disable-shuffle`` (its custom dataset is shuffled by default: another order
than the file's, which on a prefix-heavy workload with scarce KV is another load), ``--skip-chat-
template``, ``--ignore-eos`` and ``--ready-check-timeout-sec 0`` (its "initial single prompt test
run" would leave the first document in the prefix cache); the tool replays without warm-up, as
``autotune.bench.replay`` with its own client, and its figures are ``autotune.bench.summarize``'s.
Each run's per-request timings of both clients are kept, so a difference can be read request by
request (``per_request`` in the JSON: send offset, TTFT, TPOT of each prompt, both clients).

    python benchmarks/bench_vs_vllm.py --model-dir .models/tiny-l8 --workload W.jsonl \\
        --rounds 3 --concurrency 8 --rate 6 --engine-arg=--enforce-eager ... --json-out F
    python benchmarks/bench_vs_vllm.py --url http://127.0.0.1:8000 --model-dir M --workload W.jsonl

Without ``--workload``: a shared-document RAG workload is synthesized for the model's tokenizer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as c
import httpx
import numpy as np

from autotune.bench import ArrivalSpec, ReplayTarget, replay, replay_client, summarize
from autotune.workload import Workload, load_workload, synth_rag, write_jsonl

BENCH_SHIM = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)  # `vllm bench serve` without the console script (the CPU build's crashes: no `vllm` metadata)


# -- the server ---------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(args: argparse.Namespace, log_path: Path) -> Iterator[str]:
    """The server's base URL: ``--url`` as given, or one started here and stopped at exit."""
    if args.url:
        yield args.url.rstrip("/")
        return
    port = _free_port()
    cmd = [*shlex.split(args.launcher), "--model", args.model_dir, "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", "m", *args.engine_arg]  # fmt: skip
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + args.start_timeout
        while True:
            if proc.poll() is not None:
                sys.exit(f"bench_vs_vllm: the server exited with {proc.returncode} (log: {log_path})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            if time.monotonic() > deadline:
                sys.exit(f"bench_vs_vllm: the server was not healthy in {args.start_timeout} s ({log_path})")
            time.sleep(1)
        yield url
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s; returns once no process of the
    group is left (the API server exits before its engine core does)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the teardown short
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while True:
        proc.poll()
        try:
            os.killpg(proc.pid, signal.SIGKILL if time.monotonic() > deadline else 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def reset_cache(url: str) -> None:
    r = httpx.post(url + "/reset_prefix_cache", timeout=30, trust_env=False)
    if r.status_code != 200:
        sys.exit(f"bench_vs_vllm: POST {url}/reset_prefix_cache answered {r.status_code} "
                 "(fix: start the server with VLLM_SERVER_DEV_MODE=1)")  # fmt: skip


def served_model(url: str) -> str:
    return str(httpx.get(url + "/v1/models", timeout=10, trust_env=False).json()["data"][0]["id"])


# -- the arrivals -------------------------------------------------------------------------------
def bench_offsets(n: int, rate: float, seed: int) -> np.ndarray:
    """The send offsets ``vllm bench serve --request-rate rate --seed seed`` plans (burstiness 1),
    from its first request: vllm/benchmarks/serve.py ``get_request``."""
    np.random.seed(seed)
    delays = np.cumsum([np.random.gamma(shape=1.0, scale=1.0 / rate) for _ in range(n)])
    delays *= (n / rate) / delays[-1]
    return np.asarray(delays - delays[0])


def repeated(workload: Workload, times: int) -> Workload:
    """The workload's requests ``times`` over, in file order each time (ids made unique)."""
    reqs = tuple(replace(r, index=k * len(workload.requests) + r.index, id=f"{r.id}~{k}", timestamp=None)
                 for k in range(times) for r in workload.requests)  # fmt: skip
    return replace(workload, requests=reqs) if times > 1 else workload


def with_timestamps(workload: Workload, offsets: np.ndarray) -> Workload:
    reqs = tuple(replace(r, timestamp=float(t)) for r, t in zip(workload.requests, offsets, strict=True))
    return replace(workload, requests=reqs)


# -- one run of each client ---------------------------------------------------------------------
def run_bench(
    url: str, model: str, args: argparse.Namespace, dataset: Path, mode: str, out: Path
) -> dict[str, Any]:
    n = sum(1 for line in dataset.read_text().splitlines() if line.strip())
    cmd = [sys.executable, "-c", BENCH_SHIM, "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", model, "--tokenizer", args.model_dir,
           "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "-1",
           "--skip-chat-template", "--num-prompts", str(n), "--ignore-eos",
           "--ready-check-timeout-sec", "0", "--temperature", "0", "--seed", str(args.seed),
           "--save-result", "--save-detailed", "--result-dir", str(out.parent),
           "--result-filename", out.name, "--disable-tqdm"]  # fmt: skip
    if not (args.bench_shuffle or mode.endswith("-shuffled")):
        cmd.append("--disable-shuffle")
    if mode.startswith("closed"):
        cmd += ["--max-concurrency", str(args.concurrency), "--request-rate", "inf"]
    else:
        cmd += ["--request-rate", str(args.rate)]
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        sys.exit(f"bench_vs_vllm: vllm bench serve exited {proc.returncode}: {proc.stderr[-2000:]}")
    raw = json.loads(out.read_text())
    starts = np.asarray(raw["start_times"]) - min(raw["start_times"])
    ttft = np.asarray(raw["ttfts"])
    itls = [np.asarray(x) for x in raw["itls"]]
    outs = np.asarray(raw["output_lens"])
    tpot = np.array([x.sum() / (k - 1) if k > 1 else np.nan for x, k in zip(itls, outs, strict=True)])
    return {
        "per_request": {"sent": starts.tolist(), "ttft": ttft.tolist(), "tpot": tpot.tolist(),
                        "e2el": (ttft + np.array([x.sum() for x in itls])).tolist(), "out": outs.tolist()},
        "reported": {k: raw.get(k) for k in ("median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "p90_tpot_ms",
                                              "median_itl_ms", "output_throughput", "duration", "completed")},
    }  # fmt: skip


async def _run_tool(url: str, model: str, workload: Workload, arrival: ArrivalSpec) -> dict[str, Any]:
    timeout = httpx.Timeout(600.0, connect=10.0)
    async with replay_client(max_in_flight=1024, timeout=timeout) as client:
        result = await replay(client, ReplayTarget(base_url=url, model=model), workload, arrival)
    timings = sorted(result.timings, key=lambda t: t.request_id)
    order = {r.id: i for i, r in enumerate(workload.requests)}
    timings.sort(key=lambda t: order[t.request_id])
    sent0 = min(t.sent for t in timings)
    figures = summarize(result.timings, result.duration_s)
    return {
        "per_request": {"sent": [t.sent - sent0 for t in timings], "ttft": [t.ttft for t in timings],
                        "tpot": [t.tpot if t.tpot is not None else float("nan") for t in timings],
                        "e2el": [t.latency for t in timings], "out": [t.output_tokens for t in timings]},
        "reported": {"median_ttft_ms": figures.metric("ttft_p50"), "p90_ttft_ms": figures.metric("ttft_p90"),
                     "median_tpot_ms": figures.metric("tpot_p50"), "p90_tpot_ms": figures.metric("tpot_p90"),
                     "median_itl_ms": figures.metric("itl_p50"), "output_throughput": figures.output_throughput,
                     "duration": result.duration_s, "completed": len(timings) - figures.failed,
                     "lag_p99_ms": result.lag_p99_ms},
    }  # fmt: skip


# -- figures ------------------------------------------------------------------------------------
def figures(per: dict[str, list[float]]) -> dict[str, float]:
    """Every run's figures by one definition (vLLM's: TPOT = (E2EL - TTFT) / (out - 1))."""
    ttft, tpot = np.asarray(per["ttft"], float) * 1000, np.asarray(per["tpot"], float) * 1000
    e2el = np.asarray(per["e2el"], float)
    span = max(np.asarray(per["sent"]) + e2el)
    return {"ttft_p50": float(np.percentile(ttft, 50)), "ttft_p90": float(np.percentile(ttft, 90)),
            "tpot_p50": float(np.nanpercentile(tpot, 50)), "tpot_p90": float(np.nanpercentile(tpot, 90)),
            "out_tok_s": float(np.sum(per["out"]) / span)}  # fmt: skip


def spread(values: Sequence[float]) -> float:
    """(max - min) / mean of one figure over a client's runs."""
    v = np.asarray(values, float)
    return float((v.max() - v.min()) / v.mean()) if len(v) > 1 and v.mean() else 0.0


def summary_rows(runs: list[dict[str, Any]], mode: str) -> list[list[str]]:
    rows = []
    keys = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90", "out_tok_s")
    by = {
        k: [r["figures"] for r in runs if r["client"] == k and r["mode"] == mode] for k in ("bench", "tool")
    }
    for key in keys:
        b = [f[key] for f in by["bench"]]
        t = [f[key] for f in by["tool"]]
        ratio = np.median(t) / np.median(b) if b and t and np.median(b) else float("nan")
        rows.append([mode, key, " / ".join(f"{x:.1f}" for x in b), " / ".join(f"{x:.1f}" for x in t),
                     f"{ratio:.3f}", f"{spread(b):.1%}", f"{spread(t):.1%}"])  # fmt: skip
    return rows


def per_request_gap(runs: list[dict[str, Any]], mode: str) -> dict[str, float]:
    """Tool minus bench, request by request (medians over runs of each prompt), in ms."""

    def med(client: str, key: str) -> np.ndarray:
        arr = [
            np.asarray(r["per_request"][key], float)
            for r in runs
            if r["client"] == client and r["mode"] == mode
        ]
        return np.nanmedian(np.vstack(arr), axis=0)  # fmt: skip

    out = {}
    for key in ("sent", "ttft", "tpot"):
        d = (med("tool", key) - med("bench", key)) * 1000
        out[f"{key}_diff_p50_ms"] = float(np.nanmedian(d))
        out[f"{key}_diff_p10_ms"] = float(np.nanpercentile(d, 10))
        out[f"{key}_diff_p90_ms"] = float(np.nanpercentile(d, 90))
    return out


def make_workload(args: argparse.Namespace, work: Path) -> Path:
    if args.workload:
        return Path(args.workload)
    from autotune.workload import LengthSpec, load_tokenizer

    recs = synth_rag(documents=args.docs, document_tokens=args.doc_tokens, questions_per_document=args.questions,
                     output_tokens=LengthSpec(args.output_tokens, args.output_tokens), rate=None,
                     seed=args.seed, tokenizer=load_tokenizer(args.model_dir))  # fmt: skip
    path = work / "workload.jsonl"
    write_jsonl(recs, path)
    return path


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM (timeout, a job runner) stops the server as Ctrl-C does


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="the model folder (also bench's --tokenizer)")
    ap.add_argument("--workload", help="a workload file with prompts (completions); default: synthesized RAG")
    ap.add_argument("--url", help="a running server (with VLLM_SERVER_DEV_MODE=1); default: start one")
    ap.add_argument("--launcher", default=f"{sys.executable} -m vllm.entrypoints.openai.api_server")
    ap.add_argument("--engine-arg", action="append", default=[], help="a flag of the server started here")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1, help="send the workload's requests this many times over")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rate", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="closed,poisson")
    ap.add_argument(
        "--bench-shuffle", action="store_true", help="let bench shuffle its dataset (its default)"
    )
    ap.add_argument("--docs", type=int, default=12)
    ap.add_argument("--doc-tokens", type=int, default=1200)
    ap.add_argument("--questions", type=int, default=5, help="questions per document")
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--start-timeout", type=float, default=600)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    args.workload = str(make_workload(args, work))
    workload = repeated(load_workload(Path(args.workload)), args.repeat)
    dataset = work / "bench.jsonl"
    write_jsonl([{"prompt": r.prompt, "output_tokens": r.max_tokens} for r in workload.requests], dataset)
    offsets = bench_offsets(len(workload.requests), args.rate, args.seed)
    runs: list[dict[str, Any]] = []
    load = {"start": c.load_average()}
    with served(args, work / "server.log") as url:
        model = served_model(url)
        for mode in args.modes.split(","):
            for k in range(args.rounds):
                order = ("bench", "tool") if k % 2 == 0 else ("tool", "bench")
                for client in order:
                    reset_cache(url)
                    if client == "bench":
                        run = run_bench(url, model, args, dataset, mode, work / f"bench-{mode}-{k}.json")
                    else:
                        wl, arr = ((workload, ArrivalSpec(mode="closed", concurrency=args.concurrency))
                                   if mode.startswith("closed") else
                                   (with_timestamps(workload, offsets), ArrivalSpec(mode="timestamps")))  # fmt: skip
                        run = asyncio.run(_run_tool(url, model, wl, arr))
                    run.update(client=client, mode=mode, round=k, figures=figures(run["per_request"]))
                    if mode == "poisson":
                        run["schedule_max_diff_ms"] = float(
                            np.max(np.abs(np.asarray(run["per_request"]["sent"]) - offsets)) * 1000
                        )
                    runs.append(run)
                    c.write_json(args.json_out, {"args": vars(args), "runs": runs, "partial": True})
                    f = run["figures"]
                    print(f"{mode} round {k} {client}: TTFT p50 {f['ttft_p50']:.1f} p90 {f['ttft_p90']:.1f} ms, "
                          f"TPOT p50 {f['tpot_p50']:.2f} ms, {f['out_tok_s']:.1f} tok/s", flush=True)  # fmt: skip
    load["end"] = c.load_average()
    head = [
        "mode",
        "figure",
        "bench runs",
        "tool runs",
        "tool/bench (medians)",
        "bench spread",
        "tool spread",
    ]
    rows = [row for mode in args.modes.split(",") for row in summary_rows(runs, mode)]
    print(c.md_table(head, rows))
    gaps = {mode: per_request_gap(runs, mode) for mode in args.modes.split(",")}
    print(json.dumps(gaps, indent=1))
    c.write_json(args.json_out, {"environment": c.environment(), "load_average": load, "args": vars(args),
                                 "requests": len(workload.requests), "runs": runs, "per_request_gap": gaps,
                                 "table": [head, *rows]})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
