"""``autotune bench``: replay a workload against a server that is already running and report the figures a
study trial reports (the same measurement: warm-up, passes, figures, /metrics delta). Nothing is started
or stopped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from autotune import usecases
from autotune.cli._console import console, out
from autotune.cli._study_options import cli_option
from autotune.errors import ConfigError
from autotune.study import TrialRecord
from autotune.studyfile import StudySpec

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["bench"]

Workload: Any = cli_option("workload")[0]
Rate: Any = cli_option("rate")[0]
Burstiness: Any = cli_option("burstiness")[0]
Concurrency: Any = cli_option("concurrency")[0]
Speed: Any = cli_option("speed")[0]
Seed: Any = cli_option("seed")[0]
Warmup: Any = cli_option("warmup")[0]
Slo: Any = cli_option("slo")[0]
MaxRequests: Any = cli_option("max_requests")[0]
Sample: Any = cli_option("sample")[0]
History: Any = cli_option("history")[0]
MaxDuration: Any = cli_option("max_duration")[0]
CapacityTolerance: Any = cli_option("capacity_tolerance")[0]
CapacityLevels: Any = cli_option("capacity_levels")[0]
CapacityMinLevel: Any = cli_option("capacity_min_level")[0]
_PCTS = ("p50", "p90", "p99")


Url = Annotated[
    str, typer.Option(help="Root URL of the running OpenAI-compatible server, e.g. http://127.0.0.1:8000.")
]
Passes = Annotated[
    str, typer.Option(help="Replays of the workload, the prefix cache emptied between them (the server needs "
                      "VLLM_SERVER_DEV_MODE=1 for that); the figures are their median.")
]  # fmt: skip
Model = Annotated[
    Optional[str], typer.Option("--model", "-m", help="Model to ask for. Default: the server's only model (GET /v1/models).")
]  # fmt: skip
ApiKeyEnv = Annotated[
    Optional[str], typer.Option(help="Name of the environment variable that holds the server's API key.")
]
JsonOut = Annotated[
    Optional[Path], typer.Option(help="Write the measurement here as JSON: a study's trial record (`autotune compare` reads it).")
]  # fmt: skip
Capacity = Annotated[
    bool, typer.Option("--capacity", help="Bracket the server's capacity at the --slo limits: the workload replayed at "
                       "doubling, then bisected loads, its prefix cache emptied before each (the server needs "
                       "VLLM_SERVER_DEV_MODE=1 for that); prints a table of levels and the capacity.")
]  # fmt: skip
HtmlOut = Annotated[
    Optional[Path], typer.Option(help="With --capacity: write a page with latency against load and the knee marked "
                                 "(default: beside --json-out, as .html).")
]  # fmt: skip


def bench(
    url: Url,
    workload: Workload = None,
    rate: Rate = None,
    burstiness: Burstiness = None,
    concurrency: Concurrency = None,
    speed: Speed = 1.0,
    passes: Passes = "1",
    warmup: Warmup = 2,
    seed: Seed = 0,
    max_requests: MaxRequests = None,
    sample: Sample = None,
    slo: Slo = None,
    history: History = "recorded",
    model: Model = None,
    api_key_env: ApiKeyEnv = None,
    json_out: JsonOut = None,
    capacity: Capacity = False,
    capacity_tolerance: CapacityTolerance = 0.10,
    capacity_levels: CapacityLevels = 6,
    capacity_min_level: CapacityMinLevel = "10s",
    max_duration: MaxDuration = None,
    html_out: HtmlOut = None,
) -> None:
    """Measure a running server as a study trial measures its engine: TTFT/TPOT/ITL/E2EL, throughput, goodput
    (with --slo), schedule lag and prefix-cache hits. Never starts or stops an engine.

    Exit codes: 0 measured; 1 no request succeeded; 2 bad input, or a server that is unreachable or refuses.
    """
    choices = _study_spec(
        workload=workload, rate=rate, burstiness=burstiness, concurrency=concurrency, speed=speed,
        passes=passes, warmup=warmup, seed=seed, max_requests=max_requests, sample=sample,
        slo=tuple(slo or ()), history=history, model=model, api_key_env=api_key_env,
        objective="capacity" if capacity else "ttft_p90", capacity_tolerance=capacity_tolerance,
        capacity_levels=capacity_levels, capacity_min_level=capacity_min_level, max_duration=max_duration,
    )  # fmt: skip
    outcome = usecases.bench(choices, url, json_out=json_out, html_out=html_out)
    out.print(outcome.heading, soft_wrap=True)
    _print_figures(outcome, capacity)
    for path in outcome.written:
        out.print(f"wrote {path}")
    if outcome.failure is not None:
        console.print(f"[red]{outcome.failure}[/red]", soft_wrap=True)
        raise typer.Exit(outcome.exit_code)


def _study_spec(**options: Any) -> StudySpec:
    """The options as a study's choices; an option the model rejects, as one line."""
    try:
        return StudySpec(**options)
    except ValidationError as exc:  # the model's own check of an option, as one line
        err = exc.errors()[0]
        name = str(err["loc"][0]).replace("_", "-") if err["loc"] else "?"
        raise ConfigError(f"--{name}: {str(err['msg']).removeprefix('Value error, ')}") from None


def _print_figures(outcome: usecases.BenchOutcome, capacity: bool) -> None:
    """The measurement's table and lines, then its notes; with ``capacity``, the levels and the headline."""
    rec = outcome.record
    if capacity:
        out.print(level_table(rec))
        out.print(outcome.headline, soft_wrap=True, markup=False)
    else:
        out.print(figure_table(rec))
        for line in summary_lines(rec, outcome.slos_ms):
            out.print(line, soft_wrap=True, markup=False)
    for note in rec.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)


def level_table(rec: TrialRecord) -> Table:
    """One row a load level, in the order measured: load, TTFT/TPOT p50 and p90, saturated, SLO held."""
    table = Table()
    for col in (
        "load",
        "req/s",
        "served",
        "TTFT p50",
        "TTFT p90",
        "TPOT p50",
        "TPOT p90",
        "saturated",
        "SLO",
    ):
        table.add_column(col, justify="left" if col == "SLO" else "right")
    raw = rec.figures.as_dict() if rec.figures is not None else {}
    for lv in raw.get("capacity_levels") or ():
        table.add_row(
            f"{lv['x']:.3g}x", f"{lv['offered_rps']:.3g}", f"{lv['served_rps']:.3g}",
            *(_ms(lv.get(k)) for k in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")),
            "yes" if lv.get("saturated") else "no",
            "held" if lv.get("held") else f"broke: {lv.get('broke')}",
        )  # fmt: skip
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def figure_table(rec: TrialRecord) -> Table:
    """Latency percentiles and means (ms) of TTFT, TPOT, ITL and E2EL, as ``vllm bench serve`` defines them."""
    table = Table()
    table.add_column("ms")
    for col in ("mean", *_PCTS):
        table.add_column(col, justify="right")
    f = rec.figures
    for name in ("ttft", "tpot", "itl", "e2el"):
        values = [f.get(f"{name}_mean") if f else None, *(f.get(f"{name}_{p}") if f else None for p in _PCTS)]
        table.add_row(name.upper(), *(_ms(v) for v in values))
    return table


def summary_lines(rec: TrialRecord, slos_ms: dict[str, float]) -> list[str]:
    """Throughput, goodput and the SLOs, the schedule lag, the prefix-cache hits and the passes."""
    f = rec.figures
    if f is None:
        return []
    raw: dict[str, Any] = f.as_dict()
    lines = [
        f"requests: {f.completed} completed, {f.failed} failed in {float(raw.get('duration_s') or 0):.1f} s; "
        f"{float(raw.get('request_throughput') or 0):.2f} req/s, {f.output_throughput:.1f} output tok/s"
    ]
    goodput = f.get("goodput")  # None without a per-request SLO
    if goodput is not None:
        lines.append(f"goodput: {goodput:.2f} req/s meeting every per-request SLO")
    for name, limit in slos_ms.items():
        value = f.get(name)
        held = "held" if value is not None and value <= limit else "MISSED"
        lines.append(f"SLO {name} <= {limit:g} ms: {held} ({_ms(value)} ms)")
    lag = f"schedule lag: p99 {float(raw.get('lag_p99_ms') or 0):.1f} ms, max {float(raw.get('lag_max_ms') or 0):.1f} ms"
    lines.append(
        lag + (f" (behind schedule: {raw.get('schedule_note')})" if raw.get("behind_schedule") else "")
    )
    m = rec.metrics
    if m is None:
        lines.append("prefix cache: /metrics did not answer (no hit rates)")
    else:
        gpu, host = m.prefix_hit_rate, m.host_hit_rate
        lines.append(
            "prefix cache (the server's /metrics over the replay, other traffic included): "
            f"GPU hits {'-' if gpu is None else f'{gpu:.1%}'} of queried tokens, "
            f"host (CPU pool) hits {'-' if host is None else f'{host:.1%}'} of prompt tokens"
        )
    spread = rec.pass_spread("ttft_p90")
    if spread is not None:
        lines.append(f"{len(rec.passes)} passes: ttft_p90 ±{spread / 2:.0%}")
    return lines
