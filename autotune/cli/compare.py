"""``autotune compare``: re-measure two configurations alternately, exactly as study trials are measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from autotune.cli import _options as o
from autotune.cli._console import console, out
from autotune.errors import ConfigError
from autotune.study import TrialRecord
from autotune.trial import Comparison, compare_configs, config_to_args
from autotune.tuning import TuningSetup, build_setup, on_gpus

# ruff: noqa: UP045  (typer needs Optional at runtime on Python 3.10)

__all__ = ["compare"]

_ROWS = (
    "ttft_p50",
    "ttft_p90",
    "tpot_p50",
    "output_throughput",
    "goodput",
    "prefix_hit_rate",
    "host_hit_rate",
)


def compare(
    workload: o.Workload,
    config: Annotated[Path, typer.Option(help="Config to check (e.g. the exported best.yaml), arm B.")],
    model: Annotated[Optional[str], typer.Option(help="Model (default: the config's 'model').")] = None,
    baseline_config: Annotated[
        Optional[Path], typer.Option(help="Arm A config (default: vLLM's defaults plus --engine-arg flags).")
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Measurements of each arm (A B A B ...).")] = 3,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            help="Measure on these GPUs only (one engine's worth, e.g. 1, or 2,3 for --tensor-parallel-size 2), "
            "leased meanwhile: no study's worker starts an engine on them. Default: the GPUs this process sees."
        ),
    ] = None,
    engine_arg: o.EngineArg = None,
    profile: o.Profile = None,
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
    slo: o.Slo = None,
    log_dir: Annotated[Path, typer.Option(help="Where vLLM's logs of each run go.")] = Path(
        "studies/compare"
    ),
    json_out: Annotated[Optional[Path], typer.Option(help="Write every figure as JSON here.")] = None,
    passes: o.Passes = "auto",
    compile_cache: o.CompileCache = None,
) -> None:
    """Measure arm A (defaults) and arm B (a config) alternately and report medians, spread and ratio.

    Exit codes: 0 both arms measured; 1 an arm produced no figures; 2 bad input (an arm that cannot
    start here is refused before any launch).
    """
    from autotune.cli._options import tuning_choices

    cfg_model, b_args = config_to_args(config)
    a_model, a_args = config_to_args(baseline_config) if baseline_config else ("", [])
    the_model = model or cfg_model or a_model
    if not the_model:
        raise ConfigError(f"{config}: no 'model' in the config (fix: pass --model)")
    choices = tuning_choices(
        workload=workload, model=the_model, profile=profile, engine_arg=engine_arg, launcher=launcher,
        startup_timeout=startup_timeout, rate=rate, burstiness=burstiness, concurrency=concurrency,
        speed=speed, sample=sample, seed=seed, warmup=warmup, history=history, api_key_env=api_key_env,
        host_share=host_share, allow_swap=allow_swap, check_memory=check_memory, check_args=check_args,
        slo=slo,
        passes=passes,
        compile_cache=compile_cache,
    )  # fmt: skip
    a_name = f"A {baseline_config}" if baseline_config else "A defaults"
    b_name = f"B {config}"
    with build_setup(choices) as base, on_gpus(base, gpus, owner=f"compare {config}") as setup:
        arms = [(a_name, a_args), (b_name, b_args)]
        _precheck(setup, arms)
        setup.check_fixed_flags()

        def on_run(name: str, r: int, rec: TrialRecord) -> None:
            f = rec.figures
            console.print(
                f"round {r + 1}/{rounds} {name}: {rec.status.value}"
                + (
                    f" ttft p50 {f.get('ttft_p50') or 0:.1f} ms p90 {f.get('ttft_p90') or 0:.1f} ms, "
                    f"{f.output_throughput:.1f} tok/s"
                    if rec.ok and f
                    else f" ({rec.failure}: {(rec.reason or '').split(';')[0]})"
                ),
                soft_wrap=True,
            )

        result = compare_configs(setup.evaluator(log_dir), arms, rounds=rounds, on_run=on_run)
    out.print(_table(result, setup.workload.path.name, rounds))
    for line in result.disagreeing():
        console.print(f"[yellow]{line}[/yellow]", soft_wrap=True)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.as_dict(), indent=2))
        out.print(f"wrote {json_out}")
    failed = [arm.name for arm in (result.a, result.b) if not arm.measured]
    if failed:
        console.print(f"[red]no figures from {' and '.join(failed)}[/red]: every run failed (see {log_dir})")
        raise typer.Exit(1)


def _precheck(setup: TuningSetup, arms: list[tuple[str, list[str]]]) -> None:
    """The memory check ``run`` makes before a trial, for each arm, before anything starts."""
    for name, args in arms:
        reasons = setup.fit_reasons(args)
        if reasons:
            raise ConfigError(
                f"{name}: does not fit this machine: {'; '.join(reasons)} "
                "(fix: a smaller KV/offload setting, or --no-check-memory to measure anyway)"
            )


def _table(result: Comparison, workload_name: str, rounds: int) -> Table:
    table = Table(title=f"{workload_name}: {rounds} runs each, alternating; median [min-max]")
    table.add_column("figure")
    for arm in (result.a, result.b):
        table.add_column(arm.name)
    table.add_column("B / A")
    for name in _ROWS:
        if name not in result.a.figures and name not in result.b.figures:
            continue
        cells = []
        for arm in (result.a, result.b):
            med, spread = arm.median(name), arm.spread(name)
            cells.append(
                f"{med:.3g} [{spread[0]:.3g}-{spread[1]:.3g}]" if med is not None and spread else "-"
            )
        ratio = result.ratio(name)
        table.add_row(name, *cells, f"{ratio:.2f}x" if ratio else "-")
    return table
