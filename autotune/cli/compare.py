"""``autotune compare``: re-measure two configurations alternately, exactly as study trials are measured."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import typer
from rich.table import Table

from autotune.cli._console import console, out
from autotune.cli._study_options import study_command
from autotune.errors import ConfigError
from autotune.metrics import COMPARED, shown_in
from autotune.study import TrialRecord
from autotune.studyfile import StudySpec
from autotune.trial import Comparison, compare_configs, compare_recorded, config_to_args, read_measurement
from autotune.tuning import TuningSetup, build_setup, on_gpus

__all__ = ["compare"]

_ROWS = shown_in(COMPARED)


@study_command("compare")
def compare(spec: StudySpec) -> None:
    """Measure arm A (defaults) and arm B (a config) alternately and report medians, spread and ratio.

    Exit codes: 0 both arms measured; 1 an arm produced no figures; 2 bad input (an arm that cannot
    start here is refused before any launch).
    """
    if any(p is not None and p.suffix == ".json" for p in (spec.config, spec.baseline_config)):
        _compare_recorded(spec)
        return
    if spec.config is None:
        raise ConfigError(
            "compare: --config is required (fix: the config to check, e.g. the exported best.yaml)"
        )
    cfg_model, b_args = config_to_args(spec.config)
    a_model, a_args = config_to_args(spec.baseline_config) if spec.baseline_config else ("", [])
    the_model = spec.model or cfg_model or a_model
    if not the_model:
        raise ConfigError(f"{spec.config}: no 'model' in the config (fix: pass --model)")
    arms = [
        (f"A {spec.baseline_config}" if spec.baseline_config else "A defaults", a_args),
        (f"B {spec.config}", b_args),
    ]
    with (
        build_setup(spec.model_copy(update={"model": the_model})) as base,
        on_gpus(base, spec.gpus, owner=f"compare {spec.config}") as setup,
    ):
        _precheck(setup, arms)
        setup.check_fixed_flags()
        result = compare_configs(
            setup.evaluator(spec.log_dir), arms, rounds=spec.rounds, on_run=_on_run(spec.rounds)
        )
    out.print(_table(result, f"{setup.workload.path.name}: {spec.rounds} runs each, alternating"))
    for line in result.disagreeing():
        console.print(f"[yellow]{line}[/yellow]", soft_wrap=True)
    _write_json(spec, result)
    failed = [arm.name for arm in (result.a, result.b) if not arm.measured]
    if failed:
        console.print(
            f"[red]no figures from {' and '.join(failed)}[/red]: every run failed (see {spec.log_dir})"
        )
        raise typer.Exit(1)


def _on_run(rounds: int) -> Callable[[str, int, TrialRecord], None]:
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

    return on_run


def _precheck(setup: TuningSetup, arms: list[tuple[str, list[str]]]) -> None:
    """The memory check ``run`` makes before a trial, for each arm, before anything starts."""
    for name, args in arms:
        reasons = setup.fit_reasons(args)
        if reasons:
            raise ConfigError(
                f"{name}: does not fit this machine: {'; '.join(reasons)} "
                "(fix: a smaller KV/offload setting, or --no-check-memory to measure anyway)"
            )


def _compare_recorded(spec: StudySpec) -> None:
    """Two measurements ``autotune bench --json-out`` wrote (a running server each, or one server
    before and after a change): their figures side by side with the ratio; nothing is launched."""
    if (
        spec.config is None
        or spec.baseline_config is None
        or spec.baseline_config.suffix != spec.config.suffix
    ):
        raise ConfigError(
            "compare: recorded measurements (.json of `autotune bench --json-out`) are compared with each "
            "other only (fix: --baseline-config A.json --config B.json, or two vLLM config YAMLs to measure)"
        )
    a, b = read_measurement(spec.baseline_config), read_measurement(spec.config)
    result = compare_recorded((f"A {spec.baseline_config}", a), (f"B {spec.config}", b))
    out.print(_table(result, "recorded measurements, not re-measured (range: their passes)"))
    for line in _unlike(spec.baseline_config, spec.config):
        console.print(f"[yellow]{line}[/yellow]", soft_wrap=True)
    _write_json(spec, result)
    failed = [arm.name for arm in (result.a, result.b) if not arm.measured]
    if failed:
        console.print(f"[red]no figures in {' and '.join(failed)}[/red]")
        raise typer.Exit(1)


def _write_json(spec: StudySpec, result: Comparison) -> None:
    if spec.json_out is not None:
        spec.json_out.parent.mkdir(parents=True, exist_ok=True)
        spec.json_out.write_text(json.dumps(result.as_dict(), indent=2))
        out.print(f"wrote {spec.json_out}")


def _unlike(a: Path, b: Path) -> list[str]:
    """A line for each thing two measurements did not share (workload, arrivals, requests)."""
    sides = [json.loads(p.read_text()).get("bench") or {} for p in (a, b)]
    return [
        f"the two measurements differ in {key}: {sides[0].get(key)!r} vs {sides[1].get(key)!r}; "
        "the ratio compares unlike runs"
        for key in ("workload", "requests", "arrival")
        if sides[0].get(key) != sides[1].get(key)
    ]


def _table(result: Comparison, title: str) -> Table:
    table = Table(title=f"{title}; median [min-max]")
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
