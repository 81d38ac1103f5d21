"""Options shared by the commands that measure (run, compare, nightly): one declaration each,
so the same option means the same thing everywhere; and the choices they make up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.tuning import ArrivalChoice, TuningChoices

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["tuning_choices"]

Workload = Annotated[
    Path, typer.Option("--workload", "-w", help="JSONL workload file (one request per line).")
]
Model = Annotated[str, typer.Option("--model", "-m", help="Model directory or name, as vLLM takes it.")]
Profile = Annotated[
    Optional[str],
    typer.Option(
        help="Engine profile: cuda-native, cuda-lmcache, ascend or cpu (how offload knobs reach the engine). "
        "Default: detected from the installed vLLM (see autotune doctor)."
    ),
]
Space = Annotated[
    Optional[Path],
    typer.Option(help="Search-space YAML. Default: search_spaces/cpu.yaml on the CPU build, cuda.yaml else."),
]
EngineArg = Annotated[
    Optional[list[str]],
    typer.Option(
        "--engine-arg",
        help="Fixed vLLM flag, not tuned (repeatable), e.g. --engine-arg=--max-model-len=4096. "
        "A fixed flag that the space also tunes is the baseline's value.",
    ),
]
Launcher = Annotated[
    Optional[str],
    typer.Option(
        help="Command that starts vLLM before the model and flags. Default: 'vllm serve' on the GPU build, "
        "'python -P -m vllm.entrypoints.openai.api_server' on the CPU build."
    ),
]
StartupTimeout = Annotated[float, typer.Option(help="Seconds vLLM may take to become healthy.")]
Rate = Annotated[Optional[float], typer.Option(help="Poisson arrivals at this many sessions/s.")]
Burstiness = Annotated[
    Optional[float], typer.Option(help="Gamma arrivals at --rate with this shape (<1 burstier).")
]
Concurrency = Annotated[Optional[int], typer.Option(help="Closed loop: this many sessions in flight.")]
Speed = Annotated[float, typer.Option(help="Replay the file's timestamps this many times faster.")]
Sample = Annotated[Optional[int], typer.Option(help="Replay a random subset of N sessions.")]
Seed = Annotated[int, typer.Option(help="Seed for sampling, arrivals and the Optuna sampler.")]
Warmup = Annotated[
    int,
    typer.Option(
        min=0,
        help="Warm-up requests per engine start, not counted: the workload's longest prompts with their words shuffled (no shared prefix), sent together.",
    ),
]
History = Annotated[
    str, typer.Option(help="Multi-turn history: 'recorded' as in the file, or 'actual' previous outputs.")
]
ApiKeyEnv = Annotated[
    Optional[str],
    typer.Option(help="Name of an environment variable holding the API key vLLM should require."),
]
HostShare = Annotated[
    float, typer.Option(help="Largest share of available host memory a CPU KV-offload pool may take.")
]
AllowSwap = Annotated[
    bool, typer.Option(help="Accept runs during which the host swapped (default: infeasible).")
]
CheckMemory = Annotated[
    bool,
    typer.Option(help="Estimate memory before launch (needs MODEL/config.json) and watch it during runs."),
]
CheckArgs = Annotated[
    bool, typer.Option(help="Check each command with the installed vLLM's own parser before launching it.")
]
SkipBadLines = Annotated[
    bool, typer.Option(help="Skip invalid workload lines (reported) instead of failing.")
]
ObjectiveMetric = Annotated[
    str,
    typer.Option(
        "--objective",
        help="Metric to optimise: ttft|tpot|itl|e2el with _p50/_p75/_p90/_p95/_p99/_mean (minimised), "
        "or output_throughput, request_throughput, goodput (maximised).",
    ),
]
Slo = Annotated[
    Optional[list[str]],
    typer.Option(help="Constraint METRIC=LIMIT, e.g. ttft_p90=800ms (repeatable). Defines goodput too."),
]
MinThroughputRatio = Annotated[
    float, typer.Option(help="A trial must reach this share of the baseline's output tokens/s.")
]
Storage = Annotated[
    Optional[str],
    typer.Option(
        help="SQLAlchemy URL (no password: use PGPASSWORD or $AUTOTUNE_STORAGE). "
        "Default: sqlite:///STUDIES_DIR/STUDY.db."
    ),
]
Passes = Annotated[
    str,
    typer.Option(
        help="Replays of the workload per started engine, the prefix cache emptied between them; the trial "
        "reports their median. auto: as many as cost at most half a one-pass trial (up to 5).",
    ),
]
Prune = Annotated[
    bool,
    typer.Option(
        help="Stop a trial early when its running objective is worse than the best's beyond the noise."
    ),
]
Prior = Annotated[
    bool,
    typer.Option(
        help="Use the workload's prefix reuse and the KV estimate to enqueue informed candidates first and skip "
        "offload where it cannot add hits."
    ),
]
CompileCache = Annotated[
    Optional[Path],
    typer.Option(
        help="Folder for vLLM's compile and kernel caches (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, "
        "TRITON_CACHE_DIR), shared by every engine that uses it: give several studies one folder and a "
        "configuration compiled once starts warm in all of them. Default: STUDY/cache (compare: LOG_DIR/cache).",
    ),
]
StudiesDir = Annotated[Path, typer.Option(help="Home of study databases, trial logs and exports.")]


def tuning_choices(
    *,
    workload: Path,
    model: str,
    profile: str | None = None,
    space: Path | None = None,
    engine_arg: list[str] | None = None,
    launcher: str | None = None,
    startup_timeout: float = 600.0,
    rate: float | None = None,
    burstiness: float | None = None,
    concurrency: int | None = None,
    speed: float = 1.0,
    sample: int | None = None,
    seed: int = 0,
    warmup: int = 2,
    history: str = "recorded",
    api_key_env: str | None = None,
    host_share: float = 0.65,
    allow_swap: bool = False,
    check_memory: bool = True,
    check_args: bool = True,
    skip_bad_lines: bool = False,
    objective: str = "ttft_p90",
    slo: list[str] | None = None,
    min_throughput_ratio: float = 0.95,
    preview: bool = False,
    passes: str = "auto",
    prune: bool = True,
    prior: bool = True,
    compile_cache: Path | None = None,
) -> TuningChoices:
    return TuningChoices(
        workload=workload,
        model=model,
        profile=profile,
        space=space,
        engine_args=tuple(engine_arg or ()),
        launcher=launcher,
        startup_timeout_s=startup_timeout,
        arrivals=ArrivalChoice(
            rate=rate, burstiness=burstiness, concurrency=concurrency, speed=speed, seed=seed
        ),
        sample=sample,
        warmup=warmup,
        history=history,
        api_key_env=api_key_env,
        host_share=host_share,
        allow_swap=allow_swap,
        check_memory=check_memory,
        check_args=check_args,
        skip_bad_lines=skip_bad_lines,
        objective=objective,
        slos=tuple(slo or ()),
        min_throughput_ratio=min_throughput_ratio,
        preview=preview,
        passes=passes,
        prune=prune,
        prior=prior,
        compile_cache=compile_cache,
    )
