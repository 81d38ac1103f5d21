"""``autotune compare``: re-measure vLLM's defaults against a config, alternately, in one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from autotune.cli import console, out

# ruff: noqa: UP045  (typer needs Optional at runtime on Python 3.10)


def compare(
    workload: Annotated[Path, typer.Option("--workload", "-w", help="JSONL workload file.")],
    config: Annotated[Path, typer.Option(help="Config to check (e.g. the exported best.yaml), arm B.")],
    model: Annotated[Optional[str], typer.Option(help="Model (default: the config's 'model').")] = None,
    baseline_config: Annotated[
        Optional[Path], typer.Option(help="Arm A config (default: vLLM's defaults plus --engine-arg flags).")
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Measurements of each arm (A B A B ...).")] = 3,
    engine_arg: Annotated[
        Optional[list[str]], typer.Option("--engine-arg", help="Fixed vLLM flags for both arms (repeatable).")
    ] = None,
    launcher: Annotated[Optional[str], typer.Option(help="Command that starts vLLM (as for run).")] = None,
    startup_timeout: Annotated[float, typer.Option(help="Seconds vLLM may take to become healthy.")] = 600.0,
    rate: Annotated[Optional[float], typer.Option(help="Poisson arrivals at this many sessions/s.")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Closed loop: sessions in flight.")] = None,
    speed: Annotated[float, typer.Option(help="Replay the file's timestamps this many times faster.")] = 1.0,
    warmup: Annotated[int, typer.Option(min=0, help="Warm-up requests per run, not counted.")] = 2,
    slo: Annotated[
        Optional[list[str]], typer.Option(help="SLO METRIC=LIMIT for goodput (repeatable).")
    ] = None,
    log_dir: Annotated[Path, typer.Option(help="Where vLLM's logs of each run go.")] = Path(
        "studies/compare"
    ),
    json_out: Annotated[Optional[Path], typer.Option(help="Write every figure as JSON here.")] = None,
) -> None:
    """Measure arm A (defaults) and arm B (a config) alternately and report medians, spread and ratio."""
    from autotune._cli_run import _arrival
    from autotune.compare import compare_configs, config_to_args
    from autotune.engine import LaunchSpec, default_launcher, parse_engine_args
    from autotune.errors import ConfigError
    from autotune.study import Objective, parse_slo
    from autotune.trial import VllmEvaluator
    from autotune.workload import load_workload

    wl = load_workload(workload)
    cfg_model, b_args = config_to_args(config)
    a_model, a_args = config_to_args(baseline_config) if baseline_config else ("", [])
    the_model = model or cfg_model or a_model
    if not the_model:
        raise ConfigError(f"{config}: no 'model' in the config (fix: pass --model)")
    slos = dict(parse_slo(s) for s in (slo or []))
    spec = LaunchSpec(
        model=the_model,
        launcher=tuple(launcher.split()) if launcher else default_launcher(),
        fixed_args=parse_engine_args(engine_arg or []),
        startup_timeout_s=startup_timeout,
    )
    evaluator = VllmEvaluator(
        spec=spec,
        workload=wl,
        arrival=_arrival(wl, rate=rate, burstiness=None, concurrency=concurrency, speed=speed, seed=0),
        log_dir=log_dir,
        warmup_requests=warmup,
        slos_ms=Objective(slos_ms=slos).request_slos,
    )
    a_name = f"A {baseline_config}" if baseline_config else "A defaults"
    b_name = f"B {config}"

    def on_run(name: str, r: int, outcome: object) -> None:
        rec = outcome.record()  # type: ignore[attr-defined]
        f = rec.get("figures") or {}
        p = f.get("percentiles_ms") or {}
        console.print(
            f"round {r + 1}/{rounds} {name}: {rec['status']}"
            + (
                f" ttft p50 {p['ttft_p50']:.1f} ms p90 {p['ttft_p90']:.1f} ms, {f['output_throughput']:.1f} tok/s"
                if f
                else f" ({rec.get('failure')})"
            )
        )

    result = compare_configs(evaluator, [(a_name, a_args), (b_name, b_args)], rounds=rounds, on_run=on_run)
    table = Table(title=f"{wl.path.name}: {rounds} runs each, alternating; median [min-max]")
    table.add_column("figure")
    for arm in (result.a, result.b):
        table.add_column(arm.name)
    table.add_column("B / A")
    for name in (
        "ttft_p50",
        "ttft_p90",
        "tpot_p50",
        "output_throughput",
        "goodput",
        "prefix_hit_rate",
        "host_hit_rate",
    ):
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
    out.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.as_dict(), indent=2))
        out.print(f"wrote {json_out}")
