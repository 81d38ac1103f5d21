"""TTFT added by ``autotune capture`` in front of real vLLM, against direct requests (issue 29).

Starts the CPU build of vLLM on the tiny model (or uses ``--upstream URL``), starts ``autotune
capture`` in front of it (anonymizing, with the model's tokenizer), then sends one open-loop
schedule of short streamed completions (``max_tokens`` 1) at ``--rate`` requests/s for
``--duration`` seconds, alternating direct and proxied requests so both meet the same server load.
TTFT is the first streamed chunk with text minus the send time (as ``vllm bench serve``). Reports
p50/p99 of each and the difference, the rate reached, and the records the proxy wrote.

    .venv/bin/python benchmarks/capture_overhead.py --rate 100 --duration 30 \\
        --json benchmarks/results/issue29/capture_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, load_average, write_json  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: exited with {proc.returncode} before it was healthy")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url}: not healthy after {timeout} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(150)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


async def _one(client: httpx.AsyncClient, url: str, model: str, i: int) -> tuple[float | None, bool]:
    body = {
        "model": model,
        "prompt": f"hello number {i} of the run",
        "max_tokens": 1,
        "stream": True,
        "ignore_eos": True,
    }
    start = time.perf_counter()
    try:
        async with client.stream("POST", url + "/v1/completions", json=body) as response:
            if response.status_code != 200:
                return None, False
            ttft = None
            async for line in response.aiter_lines():
                if ttft is None and line.startswith("data: {") and '"text"' in line:
                    ttft = time.perf_counter() - start
            return ttft, True
    except httpx.HTTPError:
        return None, False


async def _schedule(
    direct: str, proxied: str, model: str, rate: float, duration: float, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n = int(rate * duration)
    offsets = np.cumsum(rng.exponential(1.0 / rate, n))
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    results: dict[str, list[float]] = {"direct": [], "capture": []}
    failed = {"direct": 0, "capture": 0}
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        for warm in range(20):  # connections and the server's first requests out of the figures
            await asyncio.gather(_one(client, direct, model, -warm), _one(client, proxied, model, -warm))
        t0 = time.perf_counter()
        tasks = []
        for i, offset in enumerate(offsets):
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            which = "direct" if i % 2 == 0 else "capture"
            tasks.append(
                (which, asyncio.create_task(_one(client, direct if which == "direct" else proxied, model, i)))
            )
        sent_s = time.perf_counter() - t0
        for which, task in tasks:
            ttft, ok = await task
            if ok and ttft is not None:
                results[which].append(ttft)
            else:
                failed[which] += 1
        done_s = time.perf_counter() - t0
    out: dict[str, Any] = {
        "requests": n,
        "offered_rate": rate,
        "sent_rate": n / sent_s,
        "completed_rate": n / done_s,
    }
    for which, values in results.items():
        arr = np.asarray(values) * 1000
        out[which] = {
            "ok": len(values),
            "failed": failed[which],
            "ttft_p50_ms": float(np.percentile(arr, 50)) if len(arr) else None,
            "ttft_p99_ms": float(np.percentile(arr, 99)) if len(arr) else None,
        }
    if out["direct"]["ttft_p50_ms"] is not None and out["capture"]["ttft_p50_ms"] is not None:
        out["added_p50_ms"] = out["capture"]["ttft_p50_ms"] - out["direct"]["ttft_p50_ms"]
        out["added_p99_ms"] = out["capture"]["ttft_p99_ms"] - out["direct"]["ttft_p99_ms"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--rate",
        type=float,
        nargs="+",
        default=[100.0],
        help="offered requests/s, both targets together (one run each)",
    )
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--upstream", help="an already running server (else the CPU build of vLLM is started)")
    p.add_argument("--model-dir", type=Path, default=None, help="tiny model directory (made if absent)")
    p.add_argument("--raw", action="store_true", help="record raw (default: anonymized)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="capture-bench-"))
    model_dir = args.model_dir or work / "tiny"
    if not (model_dir / "config.json").exists():
        from autotune.tiny_model import make_tiny_model

        make_tiny_model(model_dir)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        upstream = args.upstream
        if upstream is None:
            port = _port()
            vllm = _start(
                [
                    sys.executable,
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--model",
                    str(model_dir),
                    "--port",
                    str(port),
                    "--enforce-eager",
                    "--max-model-len",
                    "2048",
                    "--kv-cache-memory-bytes",
                    "256M",
                ],
                work / "vllm.log",
                {"HF_HUB_OFFLINE": "1"},
            )
            procs.append(vllm)
            upstream = f"http://127.0.0.1:{port}"
            _wait(upstream, vllm, 600)
        cport = _port()
        mode = ["--raw"] if args.raw else ["--model", str(model_dir), "--salt-env", "BENCH_SALT"]
        cap = _start(
            [
                sys.executable,
                "-c",
                "from autotune.cli import main; main()",
                "capture",
                "--upstream",
                upstream,
                "--listen",
                f"127.0.0.1:{cport}",
                "--out",
                str(work / "traffic"),
                *mode,
            ],
            work / "capture.log",
            {"BENCH_SALT": "bench"},
        )
        procs.append(cap)
        proxied = f"http://127.0.0.1:{cport}"
        _wait(proxied, cap, 120)
        models = httpx.get(upstream + "/v1/models", timeout=10).json()
        model = models["data"][0]["id"] if models.get("data") else str(model_dir)
        time.sleep(30 if not args.raw else 2)  # the writer loads the tokenizer: not during the run
        load_before = load_average()
        runs = []
        for rate in args.rate:
            run = asyncio.run(_schedule(upstream, proxied, model, rate, args.duration, args.seed))
            run["load_average_before"] = load_before
            run["load_average_after"] = load_before = load_average()
            runs.append(run)
        figures: dict[str, Any] = {"runs": runs}
        _stop(cap)
        procs.remove(cap)
        figures["records_written"] = sum(
            1 for f in (work / "traffic").glob("traffic-*.jsonl") for _ in f.open()
        )
    finally:
        for proc in procs:
            _stop(proc)
    payload = {
        "benchmark": "capture_overhead",
        "command": " ".join(sys.argv),
        "upstream": args.upstream or "vLLM CPU build (started)",
        "mode": "raw" if args.raw else "anonymized",
        "environment": environment(),
        **figures,
    }
    print(json.dumps(payload, indent=2, default=str))
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
