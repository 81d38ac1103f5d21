"""What every benchmark shares: the bench set-up (model, fixed flags, launcher) as the user's
choices of ``autotune run`` (:func:`tuning_choices`), the record of where and how a figure was
measured (date, commit, machine, vLLM build, command, load average), spreads of repeated
measurements and the markdown/JSON output.

Benchmarks use the library (``autotune.*``) for everything the tool itself does: every engine they
measure is built by :func:`autotune.tuning.build_setup` from these choices, so a benchmark measures
exactly as a study trial does (memory guard, vLLM's argument parser, warm-up, arrivals). This
module only holds the set-up that makes their figures comparable with each other.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from autotune.engine import VLLM
from autotune.studyfile import StudySpec
from autotune.workload import load_workload, sample_workload, write_jsonl

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CPU_SPACE = REPO / "search_spaces" / "cpu.yaml"
FAKE_LAUNCHER: tuple[str, ...] = (sys.executable, str(REPO / "tests" / "fakes" / "fake_vllm.py"))

# The bench model: the tool's tiny random-weight Llama with 8 layers instead of 2, so that a
# prefill costs more than the HTTP round trip (with 2 layers a 600-token prefill takes a few ms and
# the prefix cache cannot matter). KV cache: 8 layers x 2 (K, V) x 4 heads x 64 x 2 bytes = 8 KiB
# per token.
BENCH_LAYERS = 8
# Fixed flags of every real run. 20 MiB of KV is 2,560 tokens: 1.25 requests of --max-model-len,
# fewer than the 4 RAG documents (4 x 600 tokens) plus the requests in flight, so vLLM's default
# configuration with this pool is short of KV for a prefix-heavy workload. The search space may
# raise --kv-cache-memory-bytes (search_spaces/cpu.yaml: 8-128 MiB; 8 and 16 MiB are too small
# for one 2048-token request of this model and fail to start: infeasible trials, as data).
# The pool is the baseline's value (--baseline-arg), not fixed: a fixed flag is not tuned.
BASELINE_ARGS: tuple[str, ...] = ("--kv-cache-memory-bytes=20M",)
FIXED_ARGS: tuple[str, ...] = ("--enforce-eager", "--max-model-len=2048")
# The fake server (tests/fakes/fake_vllm.py) takes the same flags and ignores what it does not know.
QUICK_FIXED_ARGS: tuple[str, ...] = ("--max-model-len=2048",)

log = logging.getLogger("benchmarks")


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: tiny sizes, the fake server where real vLLM is not essential",
    )
    p.add_argument("--json-out", type=Path, help="write the figures as JSON here")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / "studies" / "benchmarks",
        help="study databases and vLLM logs (default: studies/benchmarks)",
    )
    p.add_argument(
        "--models-dir", type=Path, default=REPO / ".models", help="where the bench model is generated"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log the library's INFO lines")
    return p


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("benchmarks").setLevel(logging.INFO)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def bench_model(models_dir: Path) -> str:
    """The bench model's directory (generated once, reused). Quick runs use it too: the fake server
    ignores it, but the tool checks it (config.json) and sizes memory from it as for real runs."""
    from autotune.tiny_model import make_tiny_model

    return str(make_tiny_model(models_dir / f"tiny-l{BENCH_LAYERS}", layers=BENCH_LAYERS))


def fake_engine(root: Path, start_delay_s: float) -> tuple[str, str]:
    """(model, launcher) for ``--fake`` runs: the fake server, with a start-up of ``start_delay_s``
    (FAKE_START_DELAY, unless set), and a model folder holding only a tiny config.json."""
    os.environ.setdefault("FAKE_START_DELAY", f"{start_delay_s:g}")
    model_dir = Path(root) / "fake-model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(
        (REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text()
    )
    return str(model_dir), " ".join(FAKE_LAUNCHER)


def fixed_args(*, quick: bool) -> tuple[str, ...]:
    """The flags of the baseline, as the results record them: the fixed ones, then the baseline's pool."""
    return (*(QUICK_FIXED_ARGS if quick else FIXED_ARGS), *BASELINE_ARGS)


def tuning_choices(
    model: str,
    workload: Path,
    *,
    quick: bool,
    speed: float = 1.0,
    space: Path = CPU_SPACE,
    extra_args: Sequence[str] = (),
    slos: Sequence[str] = (),
    min_throughput_ratio: float = 0.95,
    fixed: Sequence[str] | None = None,
    baseline: Sequence[str] | None = None,
    profile: str = "cpu",
    startup_timeout: int = 300,
    launcher: str | None = None,
) -> StudySpec:
    """What a user would pass to ``autotune run`` for a benchmark run: the CPU build (profile
    ``cpu``, vLLM's own argument parser on) with the fixed flags, or, with ``quick``, the fake
    server under whatever profile is detected, without the parser (it would start vLLM's import
    for a server that is not vLLM). ``fixed``/``baseline``/``profile``: another engine's (the GPU
    scripts), in place of the CPU build's."""
    if fixed is None:
        fixed = QUICK_FIXED_ARGS if quick else FIXED_ARGS
    return StudySpec(
        workload=workload,
        model=model,
        profile=None if quick else profile,
        space=space,
        engine_args=(*fixed, *extra_args),
        baseline_args=tuple(BASELINE_ARGS if baseline is None else baseline),
        launcher=" ".join(FAKE_LAUNCHER) if quick else launcher,
        startup_timeout=60 if quick else startup_timeout,
        speed=speed,
        slo=tuple(slos),
        min_throughput_ratio=min_throughput_ratio,
        check_args=not quick,
    )


def example_workload(name: str, *, quick: bool, work_dir: Path, max_requests: int = 12) -> Path:
    """A shipped example; in quick mode a few whole sessions without think time (seconds, not tens),
    written to ``work_dir`` as a workload file of their own lines. A path to an existing file is
    taken as it is (the GPU scripts' workloads)."""
    path = Path(name) if Path(name).is_file() else EXAMPLES / name
    if not quick:
        return path
    wl = sample_workload(load_workload(path), max_requests, seed=0)
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [
        {k: v for k, v in json.loads(lines[r.line - 1]).items() if k != "think_time"} for r in wl.requests
    ]
    out = work_dir / f"quick-{name}"
    write_jsonl(records, out)
    return out


# -- where and how a figure was measured ---------------------------------------------------------
def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict[str, Any]:
    """Date, commit, machine, engine build and the exact command: the header of every result."""
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _git("rev-parse", "--short", "HEAD") + (" (+ uncommitted changes)" if dirty else ""),
        "machine": {
            "logical_cpus": os.cpu_count(),
            "physical_cores": psutil.cpu_count(logical=False),
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": _cpu_model(),
            "python": platform.python_version(),
        },
        "engine": VLLM.install.installed().describe(),
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_speed(seconds: float) -> float | None:
    """The machine's own single-core speed now: the median time (ms) of a fixed pure-Python unit of
    work, repeated for ``seconds``. No vLLM, no I/O: what it moves is the CPU the engine, the
    front end and the replayer share (frequency, a neighbour on the host), so a series can tell an
    engine's level from the machine's. None for ``seconds`` <= 0."""
    if seconds <= 0:
        return None
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        sum(i * i for i in range(100_000))
        times.append((time.perf_counter() - t) * 1000.0)
    return round(statistics.median(times), 3)


# -- figures -------------------------------------------------------------------------------------
def spread(values: Iterable[float]) -> dict[str, float | int]:
    """Mean, median, min, max, sample stdev and CV of repeated measurements (NaNs dropped)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return {"n": 0}
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {
        "n": len(xs),
        "mean": mean,
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "stdev": sd,
        "cv": sd / mean if mean else float("nan"),
    }


def fmt_spread(s: Mapping[str, float | int], digits: int = 1) -> str:
    """``mean (min-max)``."""
    if not s.get("n"):
        return "-"
    return f"{s['mean']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def md_header(title: str, env: Mapping[str, Any], load: Mapping[str, Sequence[float]]) -> str:
    m = env["machine"]
    return "\n".join(
        [
            f"### {title}",
            "",
            f"- date: {env['date']}; commit: `{env['commit']}`",
            f"- machine: {m['logical_cpus']} logical CPUs ({m['physical_cores']} cores, {m['cpu']}), "
            f"{m['ram_gib']} GiB RAM; engine: {env['engine']}",
            f"- command: `{env['command']}`",
            f"- load average (1/5/15 min) at start {load['start']}, at end {load['end']}",
            "",
        ]
    )


def write_json(path: Path | None, payload: Mapping[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(payload), indent=2, default=_json_default, allow_nan=False)
    path.write_text(text + "\n")


def _finite(obj: Any) -> Any:
    """NaN and infinities become null: strict JSON (a figure that could not be measured)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj: object) -> object:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")
