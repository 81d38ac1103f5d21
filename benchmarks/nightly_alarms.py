"""Nightly regression verdicts: false alarms when nothing changed, detections of a true slowdown.

Runs ``autotune nightly`` (the real command, through its CLI) night after night against the fake
OpenAI-compatible server, whose every start draws its time to first token from N(1, CV) times the
modelled one (``FAKE_RESTART_JITTER``): the restart-to-restart noise a real engine shows. Search is
off (``--max-trials 0``): each night re-measures the incumbent and the baseline ``--rounds`` times
each and gives its verdict.

- False alarms: nights 1..N with nothing changed; a night flagged as a regression is a false alarm.
- Detections: N pairs of (a normal night, a night whose server is 20% slower at the first token);
  the slow night must be flagged.

    python benchmarks/nightly_alarms.py --cv 0.05 --nights 10      # GPU-like noise
    python benchmarks/nightly_alarms.py --cv 0.10 --nights 10      # CPU-build-like p50 noise
    python benchmarks/nightly_alarms.py --quick                    # 2 + 2 nights, for the test suite
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fakes" / "fake_vllm.py"
MODEL_CONFIG = REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json"


def _workload(path: Path) -> Path:
    with path.open("w") as f:
        for i in range(24):
            f.write(
                json.dumps({"prompt": f"q{i} " + "word " * 40, "max_tokens": 4, "timestamp": i * 0.02}) + "\n"
            )
    return path


def _night(work: Path, study: str, rounds: int, scale: float, cv: float) -> tuple[int, bool]:
    model = work / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(MODEL_CONFIG.read_text())
    args = [
        sys.executable, "-m", "autotune", "nightly", "--study", study, "--workload", str(work / "wl.jsonl"),
        "--model", str(model), "--launcher", f"{sys.executable} {FAKE}", "--studies-dir", str(work / "studies"),
        "--no-check-args", "--no-check-memory", "--objective", "ttft_p50", "--budget", "10m",
        "--rounds", str(rounds), "--max-trials", "0", "--out", str(work / "deployed.yaml"),
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "FAKE_TTFT_SCALE": f"{5 * scale}",
        "FAKE_RESTART_JITTER": f"{cv}",
    }
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    if res.returncode not in (0, 3):
        raise SystemExit(f"nightly failed ({res.returncode}): {res.stderr[-2000:]}")
    return res.returncode, "REGRESSION" in res.stdout


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nights", type=int, default=10)
    p.add_argument("--cv", type=float, default=0.05, help="restart-to-restart CV of the fake's TTFT")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--slowdown", type=float, default=1.2)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    n = 2 if args.quick else args.nights
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nightly-alarms-") as d:
        work = Path(d)
        _workload(work / "wl.jsonl")
        _night(work, "quiet", args.rounds, 1.0, args.cv)  # night 0: sets the incumbent's figure
        false_alarms = sum(_night(work, "quiet", args.rounds, 1.0, args.cv)[1] for _ in range(n))
        detected = 0
        for _ in range(n):
            _night(work, "slow", args.rounds, 1.0, args.cv)
            detected += _night(work, "slow", args.rounds, args.slowdown, args.cv)[1]
    minutes = (time.monotonic() - t0) / 60
    print(
        f"restart CV {args.cv:.0%}, {args.rounds} round(s) per arm: false alarms {false_alarms} of {n} quiet "
        f"nights; detected {detected} of {n} nights {args.slowdown - 1:.0%} slower ({minutes:.1f} min)"
    )
    return 0 if args.quick else (0 if false_alarms == 0 and detected >= 0.9 * n else 1)


if __name__ == "__main__":
    raise SystemExit(main())
