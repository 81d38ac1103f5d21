"""Issue 14 on the H200: a cold start against a warm-cache start, CUDA graphs on, through the tool.

Two engines of the 8B-shaped dummy model, started by the tool's own launch path with the study's
compile cache (``LaunchSpec.cache_dir``): the first with an empty cache (cold), the second with a
different ``--gpu-memory-utilization`` (not part of vLLM's compile-cache key, as a study's next
trial would be). Each start's wall time to healthy and the phases read from vLLM's log are appended
to OUT/warm_start.json as soon as they are known (a call cut short keeps what it measured).

    bash .gpu/s/install.sh c2 && source .gpu/s/env.sh && PYTHONPATH=$PWD:$PYTHONPATH \
      python3 benchmarks/gpu/warm_start_h200.py "$OUT"
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from autotune.engine import VLLM, LaunchSpec
from autotune.space import EngineConfig

LAUNCHER = ("python3", "-m", "vllm.entrypoints.cli.main", "serve")
CACHE = Path("/tmp/autotune-warm-cache")


def gpu_used_mib() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        return out.stdout.strip()
    except OSError as exc:
        return f"nvidia-smi: {exc}"


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(CACHE, ignore_errors=True)
    spec = LaunchSpec(
        model="/root/m8b",
        launcher=LAUNCHER,
        fixed_args=(("--load-format", "dummy"), ("--max-model-len", "8192")),
        cache_dir=CACHE,
        startup_timeout_s=400,
    )
    results: list[dict[str, object]] = []
    for i, util in enumerate(("0.15", "0.18")):
        log = out / f"start-{i}-util{util}.log"
        proc = VLLM.process(spec, EngineConfig.recorded(["--gpu-memory-utilization", util]), log)
        t0 = time.monotonic()
        try:
            proc.start()
            proc.wait_healthy()
            wall = time.monotonic() - t0
            results.append(
                {
                    "start": "cold" if i == 0 else "warm",
                    "gpu_memory_utilization": util,
                    "startup_s": proc.startup_s,
                    "wall_to_healthy_s": round(wall, 1),
                    "phases": VLLM.log.startup_phases(proc.log_text()),
                }
            )
        finally:
            proc.stop()
        results[-1]["gpu_used_after_stop"] = gpu_used_mib()
        (out / "warm_start.json").write_text(json.dumps(results, indent=1))
        print(json.dumps(results[-1]), flush=True)
    if len(results) == 2:
        cold, warm = (float(str(r["startup_s"])) for r in results)
        print(f"warm/cold = {warm / cold:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/out")))
