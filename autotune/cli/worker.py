"""``autotune worker``: join an existing study and measure trials on this host's GPUs (or its share).

Started by ``autotune run --gpus`` (one per GPU or tensor-parallel group, with ``--spec``), or by hand
or by a scheduler on other hosts and pods (a Kubernetes Indexed Job: ``--index`` defaults to
``$JOB_COMPLETION_INDEX``) against a shared storage such as PostgreSQL. The study says what it
measures (workload, model, space, flags, arrivals, objective), so ``--study`` and ``--storage`` are
enough; an option given here overrides the study's (a path that differs on this host), and the
files it names must hash as the study's did.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli import _options as o
from autotune.cli._console import console, log_to_file
from autotune.cli._render import trial_line
from autotune.errors import ConfigError
from autotune.study import TrialReport
from autotune.tuning import (
    GpuGroup,
    TuningChoices,
    WorkerSpec,
    check_study_name,
    parse_gpus,
    run_worker,
    study_choices,
)

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["worker"]


def _index_default() -> int:
    try:
        return int(os.environ.get("JOB_COMPLETION_INDEX") or 0)
    except ValueError:
        return 0


# option -> the field of TuningChoices it sets (a dotted path into the arrivals)
_FIELDS = {
    "workload": "workload", "model": "model", "profile": "profile", "space": "space",
    "engine_arg": "engine_args", "launcher": "launcher", "startup_timeout": "startup_timeout_s",
    "rate": "arrivals.rate", "burstiness": "arrivals.burstiness", "concurrency": "arrivals.concurrency",
    "speed": "arrivals.speed", "seed": "arrivals.seed", "sample": "sample", "warmup": "warmup",
    "history": "history", "api_key_env": "api_key_env", "host_share": "host_share",
    "allow_swap": "allow_swap", "check_memory": "check_memory", "check_args": "check_args",
    "skip_bad_lines": "skip_bad_lines", "objective": "objective", "slo": "slos",
    "min_throughput_ratio": "min_throughput_ratio", "passes": "passes", "prune": "prune", "prior": "prior",
    "compile_cache": "compile_cache",
}  # fmt: skip


def _merge(recorded: TuningChoices, given: TuningChoices, explicit: set[str]) -> TuningChoices:
    """The study's choices, with the options given on this command line instead."""
    merged = recorded
    for option, path in _FIELDS.items():
        if option not in explicit:
            continue
        if path.startswith("arrivals."):
            name = path.split(".", 1)[1]
            arrivals = dataclasses.replace(merged.arrivals, **{name: getattr(given.arrivals, name)})
            merged = dataclasses.replace(merged, arrivals=arrivals)
        else:
            merged = dataclasses.replace(merged, **{path: getattr(given, path)})
    return merged


def worker(
    ctx: typer.Context,
    study: Annotated[
        Optional[str], typer.Option(help="The study to join (it must exist unless --create).")
    ] = None,
    storage: o.Storage = None,
    studies_dir: o.StudiesDir = Path("studies"),
    workload: Annotated[
        Optional[Path],
        typer.Option(
            "--workload", "-w", help="The workload file, when its path here differs. Default: the study's."
        ),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="The model, when its path here differs. Default: the study's."),
    ] = None,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            help="This worker's GPUs, e.g. 0 or 0,1 for a tensor-parallel group. Default: all visible."
        ),
    ] = None,
    index: Annotated[
        Optional[int],
        typer.Option(
            min=0,
            help="This worker's number: sampler seed = --seed + index; worker 0 measures the baseline while "
            "the others wait for it. Default: $JOB_COMPLETION_INDEX, else 0.",
        ),
    ] = None,
    create: Annotated[
        bool, typer.Option(help="Create the study when it does not exist (give this to one worker only).")
    ] = False,
    n_trials: Annotated[int, typer.Option(min=1, help="Trials this worker runs at most.")] = 10,
    total_trials: Annotated[
        Optional[int],
        typer.Option(min=1, help="Stop when the study has this many finished or running trials."),
    ] = None,
    timeout: Annotated[
        Optional[float], typer.Option(help="Stop starting trials after this many seconds.")
    ] = None,
    profile: o.Profile = None,
    space: o.Space = None,
    objective: o.ObjectiveMetric = "ttft_p90",
    slo: o.Slo = None,
    min_throughput_ratio: o.MinThroughputRatio = 0.95,
    engine_arg: o.EngineArg = None,
    launcher: o.Launcher = None,
    startup_timeout: o.StartupTimeout = 600.0,
    rate: o.Rate = None,
    burstiness: o.Burstiness = None,
    concurrency: o.Concurrency = None,
    speed: o.Speed = 1.0,
    sample: o.Sample = None,
    seed: o.Seed = 0,
    warmup: o.Warmup = 2,
    history: o.History = "recorded",
    api_key_env: o.ApiKeyEnv = None,
    host_share: o.HostShare = 0.65,
    allow_swap: o.AllowSwap = False,
    check_memory: o.CheckMemory = True,
    check_args: o.CheckArgs = True,
    skip_bad_lines: o.SkipBadLines = False,
    spec_file: Annotated[
        Optional[Path],
        typer.Option(
            "--spec",
            help="A worker spec file as `autotune run --gpus` writes it; replaces the options above.",
        ),
    ] = None,
    passes: o.Passes = "auto",
    compile_cache: o.CompileCache = None,
    prune: o.Prune = True,
    prior: o.Prior = True,
) -> None:
    """Join a study and measure trials with it: the same space, workload and model (checked against
    what the study recorded), on this worker's GPUs, leased so that no other worker uses them.

    Exit codes: 0 done; 2 bad input or a study made for another space, workload or model; 6 a GPU is
    leased by another worker; 130 interrupted.
    """
    from autotune.cli._options import tuning_choices

    if spec_file is not None:
        spec = WorkerSpec.load(spec_file)
        if spec.log_path is not None:
            spec.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_to_file(spec.log_path)
        run_worker(spec)
        return
    if study is None:
        raise ConfigError("worker: --study is required (fix: the name of the study to join)")
    explicit = {  # options given on this command line (or by environment), not defaults
        name
        for name in ctx.params
        if getattr(ctx.get_parameter_source(name), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    }
    recorded = study_choices(storage, check_study_name(study), studies_dir, create=create)
    if recorded is None and (workload is None or model is None):
        raise ConfigError(
            f"worker: study {study} records no workload and model (made by an older version, or not made yet) "
            "(fix: pass --workload and --model, the study's own)"
        )
    given = tuning_choices(
        workload=workload or Path("."), model=model or "", profile=profile, space=space, engine_arg=engine_arg,
        launcher=launcher, startup_timeout=startup_timeout, rate=rate, burstiness=burstiness,
        concurrency=concurrency, speed=speed, sample=sample, seed=seed, warmup=warmup, history=history,
        api_key_env=api_key_env, host_share=host_share, allow_swap=allow_swap, check_memory=check_memory,
        check_args=check_args, skip_bad_lines=skip_bad_lines, objective=objective, slo=slo,
        min_throughput_ratio=min_throughput_ratio,
        passes=passes, prune=prune, prior=prior, compile_cache=compile_cache,
    )  # fmt: skip
    choices = given if recorded is None else _merge(recorded, given, explicit)
    slot = index if index is not None else _index_default()
    wanted = parse_gpus(gpus) if gpus else None
    spec = WorkerSpec(
        choices=choices,
        study=check_study_name(study),
        studies_dir=studies_dir,
        storage=storage,
        group=GpuGroup(slot=slot, gpus=wanted or ()),
        seed=choices.arrivals.seed + slot,  # the study's seed unless --seed: workers' samplers differ
        n_trials=n_trials,
        total_trials=total_trials,
        timeout_s=timeout,
        create=create,
    )
    log_path = studies_dir / study / "workers" / f"worker-{slot}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_to_file(log_path)

    def on_done(rep: TrialReport) -> None:
        console.print(trial_line(rep, choices.objective), soft_wrap=True)

    ran = run_worker(spec, on_trial_done=on_done)
    console.print(f"worker {slot}: {ran} trial(s) measured into study {study}")
