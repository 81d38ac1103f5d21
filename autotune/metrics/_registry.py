"""Every figure a study measures, optimises, constrains, compares and prints: one entry each.

An entry says the figure's name, whether more or less is better, its unit, its label, where it
comes from, and which lists show it. Where it comes from (``Source``):

- ``LATENCY``: a statistic (a percentile or the mean) of one per-request series, in milliseconds,
  as ``vllm bench serve`` defines them: TTFT (first chunk), TPOT ((latency - TTFT) / (tokens - 1)),
  ITL (gaps between chunks, pooled), E2EL (last chunk). :func:`latency_figures` computes them.
- ``RATE``: one count of the replay over its duration (:func:`rate_figures`); goodput counts the
  requests that met every per-request SLO, so it exists only with one.
- ``CAPACITY``: the highest load at which every SLO held, bracketed by bench's capacity search over
  several replays.
- ``ENGINE``: the engine's own ``/metrics`` over the replay (prefix-cache hit rates).

Adding a figure is one entry in :data:`METRICS` (and, for a new source, its computation here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import numpy as np

Direction = Literal["minimize", "maximize"]
SloNeed = Literal["", "per_request", "any"]

SERIES = ("ttft", "tpot", "itl", "e2el")  # per-request series, in the order figures list them
PER_REQUEST = frozenset({"ttft", "tpot", "e2el"})  # judged per request (goodput); ITL is pooled
PERCENTILES = (50, 75, 90, 95, 99)

# the lists that show a figure (its ``views``), in METRICS order
COMPARED = "compare"  # re-measurements side by side (compare, confirmation)
COSTS = "costs"  # what the export says got worse than the baseline
REPORTED = "report"  # the report's baseline-vs-best and confirmation tables


class Source(StrEnum):
    LATENCY = "latency"
    RATE = "rate"
    CAPACITY = "capacity"
    ENGINE = "engine"


@dataclass(frozen=True)
class Metric:
    name: str
    direction: Direction
    unit: str  # "ms", "tok/s", "req/s"; "" for a share
    label: str  # as a sentence names it: "TTFT p90", "output throughput"
    source: Source
    series: str = ""  # LATENCY: which series ("ttft", ...)
    stat: str = ""  # LATENCY: "p50" ... "p99" or "mean"
    count: str = ""  # RATE: what it counts over the replay's duration ("completed", "output_tokens", "good")
    needs_slo: SloNeed = ""  # an objective on it needs a per-request SLO, or any SLO
    slo_note: str = ""  # what ``--objective NAME needs`` without it, and the fix
    views: frozenset[str] = frozenset()

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    @property
    def per_request(self) -> bool:
        """An SLO on it can be judged on each request (the SLOs that define goodput)."""
        return self.source is Source.LATENCY and self.series in PER_REQUEST


STATS = (*(f"p{q}" for q in PERCENTILES), "mean")  # of each series, in the order figures list them


def _latencies(series: str, **views: tuple[str, ...]) -> list[Metric]:
    """The statistics of one series (``views``: by statistic, the lists that show it)."""
    return [
        Metric(
            f"{series}_{stat}", "minimize", "ms", f"{series.upper()} {stat}", Source.LATENCY, series, stat,
            views=frozenset(views.get(stat, ())),
        )
        for stat in STATS
    ]  # fmt: skip


def _index(*entries: Metric) -> dict[str, Metric]:
    return {m.name: m for m in entries}


METRICS: Mapping[str, Metric] = _index(
    *_latencies("ttft", p50=(COMPARED, COSTS, REPORTED), p90=(COMPARED, COSTS, REPORTED), p99=(REPORTED,)),
    *_latencies("tpot", p50=(COMPARED, COSTS, REPORTED), p90=(COSTS, REPORTED)),
    *_latencies("itl", p50=(COSTS,), p90=(COSTS, REPORTED)),
    *_latencies("e2el", p50=(COSTS,), p90=(REPORTED,)),
    Metric("output_throughput", "maximize", "tok/s", "output throughput", Source.RATE, count="output_tokens",
           views=frozenset({COMPARED, COSTS, REPORTED})),
    Metric("request_throughput", "maximize", "req/s", "request throughput", Source.RATE, count="completed"),
    Metric("goodput", "maximize", "req/s", "goodput", Source.RATE, count="good", needs_slo="per_request",
           slo_note="a per-request --slo on ttft, tpot or e2el "
           "(fix: add e.g. --slo ttft_p90=800ms; itl SLOs do not define goodput)",
           views=frozenset({COMPARED, REPORTED})),
    Metric("capacity", "maximize", "req/s", "capacity", Source.CAPACITY, needs_slo="any",
           slo_note="at least one --slo: capacity is the most load at which every SLO holds "
           "(fix: add e.g. --slo ttft_p90=800ms; several are allowed)"),
    Metric("prefix_hit_rate", "maximize", "", "prefix-cache hit rate", Source.ENGINE, views=frozenset({COMPARED})),
    Metric("host_hit_rate", "maximize", "", "CPU offload hit rate", Source.ENGINE, views=frozenset({COMPARED})),
)  # fmt: skip


def maximized(name: str) -> bool:
    """More is better (a rate, a capacity, a hit rate); False for a latency or an unknown name."""
    m = METRICS.get(name)
    return m is not None and m.maximize


def objective_help() -> str:
    """The figures a study can optimise (every one but the engine's counters), as an error's fix
    names them: ``ttft|tpot|itl|e2el with _p50/.../_mean, or output_throughput, ...``."""
    stats = "/".join(f"_{stat}" for stat in STATS)
    others = ", ".join(m.name for m in METRICS.values() if m.source in (Source.RATE, Source.CAPACITY))
    return f"{'|'.join(SERIES)} with {stats}, or {others}"


def shown_in(view: str, *, sources: Sequence[Source] = tuple(Source)) -> tuple[str, ...]:
    """The figures a list shows (``COMPARED``, ``COSTS``, ``REPORTED``), in registry order."""
    return tuple(m.name for m in METRICS.values() if view in m.views and m.source in sources)


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def figure_value(raw: Mapping[str, Any], name: str) -> float:
    """Any figure by name from a replay's figures as stored (``TrialFigures.as_dict()``):
    ``ttft_p90``, ``tpot_mean``, ``output_throughput``, ``goodput``, or any other number in them
    (``completed``, ``capacity_x``); KeyError when it holds none."""
    pct = raw.get("percentiles_ms") or {}
    if name in pct:
        return _num(pct[name])
    mean = raw.get("mean_ms") or {}
    if name.endswith("_mean") and name[:-5] in mean:
        return _num(mean[name[:-5]])
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KeyError(name)
    return float(value)


def _pct_ms(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else float("nan")


def latency_figures(series: Mapping[str, Sequence[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Each series' values (seconds) -> its percentiles (``{"ttft_p90": ms}``) and means
    (``{"ttft": ms}``), in milliseconds; NaN for an empty series."""
    latencies = [m for m in METRICS.values() if m.source is Source.LATENCY]
    pct = {m.name: _pct_ms(series[m.series], float(m.stat[1:])) for m in latencies if m.stat != "mean"}
    mean = {s: float(np.mean(series[s]) * 1000.0) if series[s] else float("nan") for s in SERIES}
    return pct, mean


def rate_figures(counts: Mapping[str, int | None], duration_s: float) -> dict[str, float | None]:
    """Each rate from its count over the replay's duration; None where the count is (goodput
    without SLOs)."""
    out: dict[str, float | None] = {}
    for m in METRICS.values():
        if m.source is Source.RATE:
            n = counts.get(m.count)
            out[m.name] = None if n is None else n / duration_s
    return out


def unit(name: str) -> str:
    """The unit a figure is in: ms for latencies (and a name the registry does not know), tok/s or
    req/s for rates."""
    m = METRICS.get(name)
    return m.unit if m is not None else "ms"


def figure_text(value: float | None, name: str) -> str:
    """A figure with its unit, as every console line, export header and report prints it, never in
    exponent form: ``63.4 ms``, ``200.3 s`` (not ``2.003e+05``); ``-`` for no figure."""
    if value is None:
        return "-"
    u = unit(name)
    if u == "ms" and abs(value) >= 10_000:
        value, u = value / 1000, "s"
    return f"{value:.1f} {u}" if abs(value) >= 10 else f"{value:.3g} {u}"
