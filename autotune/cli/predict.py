"""``autotune predict``: a configuration's (or a space's best candidates') TTFT and TPOT, predicted
from a calibration file an earlier study saved on this machine, model and engine; no engine starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._console import console, out
from autotune.errors import ConfigError
from autotune.predict import (
    Calibration,
    LatencyModel,
    Ledger,
    candidate_of,
    grid_of,
    this_machine,
    workload_shape,
)
from autotune.space import Parameter, SearchSpace, load_search_space
from autotune.workload import load_workload

__all__ = ["predict"]


def _value(name: str, p: Parameter, text: str) -> Any:
    """``text`` as parameter ``p`` takes it (a choice as the space lists it, a bool, a number)."""
    for choice in p.choices or ():
        if str(choice).lower() == text.lower():
            return choice
    if p.type == "bool" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        if p.type == "int":
            return int(text)
        if p.type == "float":
            return float(text)
    except ValueError:
        pass
    hint = f"one of {list(p.choices)}" if p.choices else f"a {p.type}"
    raise ConfigError(f"--config {name}={text}: not a value of {name} (fix: {hint})")


def _config(space: SearchSpace, items: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq:
            raise ConfigError(f"--config {item}: not NAME=VALUE (fix: e.g. --config block_size=64)")
        if name not in space.parameters:
            raise ConfigError(
                f"--config {item}: {name!r} is not a parameter of the space {space.name} "
                f"(fix: one of {', '.join(space.tunable)})"
            )
        values[name] = _value(name, space.parameters[name], text)
    return values


def predict(
    workload: Annotated[Path, typer.Option(help="Workload file (JSONL) to predict under.")],
    model: Annotated[str, typer.Option(help="Model directory (its tokenizer cuts the prompts).")],
    calibration: Annotated[Path, typer.Option(help="Calibration file an earlier study saved (JSON).")],
    config: Annotated[
        list[str] | None,
        typer.Option("--config", help="NAME=VALUE of a space parameter (repeat); none: rank the space."),
    ] = None,
    space: Annotated[Path | None, typer.Option(help="Search space (default: the calibration's).")] = None,
    speed: Annotated[
        float, typer.Option(help="Replay speed: the workload's timestamps divided by it.")
    ] = 1.0,
    rate: Annotated[
        float | None, typer.Option(help="Poisson arrivals at N req/s (for a workload without timestamps).")
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="Candidates of the space to print, best first.")] = 5,
) -> None:
    """Predict TTFT p50/p90 and TPOT p50 without starting an engine. The figures are predicted."""
    cal = Calibration.load(calibration)
    if model not in (cal.model, Path(cal.model).name) and Path(model).name != Path(cal.model).name:
        raise ConfigError(
            f"--model {model}: {calibration} was calibrated on model {cal.model} (fix: pass --model "
            f"{cal.model}, or calibrate this model with a study)"
        )
    space_path = space or (Path(cal.space) if cal.space else None)
    if space_path is None:
        raise ConfigError(f"{calibration}: key 'space' is null and no --space given (fix: pass --space FILE)")
    the_space = load_search_space(space_path)
    values = _config(the_space, config) if config else None
    shape = workload_shape(load_workload(workload), model, speed=speed, rate=rate)
    lm = LatencyModel(shape, costs=cal.costs, ledger=Ledger(carried=cal.errors))
    if cal.machine != this_machine():
        console.print(f"[yellow]calibrated on {cal.machine}; this machine is {this_machine()}[/yellow]")
    out.print(
        f"PREDICTED, not measured: no engine was started. Model calibrated on {cal.machine}, "
        f"{cal.engine}, {cal.costs.requests} measured requests, {len(cal.errors)} measured errors.",
        soft_wrap=True,
    )
    if values is not None:
        p = lm.predict(candidate_of(the_space, values, cal.defaults))
        out.print(p.line(), soft_wrap=True)
        return
    points = grid_of(the_space)
    ranked = lm.rank([candidate_of(the_space, v, cal.defaults) for v in points], top)
    out.print(f"top {len(ranked)} of {len(points)} candidates of {the_space.name} by predicted p90 TTFT:")
    for i, p in enumerate(ranked, 1):
        out.print(f"{i}. {p.line()}", soft_wrap=True)
