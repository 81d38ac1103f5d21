"""Capacity at an SLO: the highest load, as a multiple of the workload's own arrivals, that one
server carries while every SLO holds, it keeps up (no saturation) and no request fails.

Pure search over an async ``measure(multiplier) -> Level`` (the caller replays the same requests at
that load on a started engine, its prefix cache emptied first): **bracket, then bisect**. From the
start multiplier the load doubles until a level breaks (or halves until one holds, down to
``min_multiplier``); then the midpoint of the last level that held and the first that broke is
measured until the bracket is within ``tolerance`` of its lower end or ``max_levels`` levels ran.
The figure is the highest load that held, with its bracket [held, broke].

Peers: vLLM's ``benchmarks/auto_tune/auto_tune.sh`` steps the rate down 1 req/s at a time from
rate=inf until p99 E2E latency meets a limit; SGLang's ``auto_benchmark`` bisects QPS (5 rounds);
GuideLLM sweeps rates to saturation. This one keeps the user's prompts, prefixes and sessions.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._figures import TrialFigures
from autotune.errors import ConfigError
from autotune.workload import Workload

__all__ = [
    "CAPACITY_METRIC",
    "DELIVERED_SHARE",
    "NOT_OFFERED",
    "CapacityPlan",
    "CapacityResult",
    "Level",
    "arrival_span",
    "base_request_rate",
    "bracket_capacity",
    "delivered_share",
    "level_verdict",
    "scaled_arrival",
]

CAPACITY_METRIC = "capacity"
MIN_LEVEL_REQUESTS = 12  # fewer requests than this cannot show a queue (see bench._saturation)
# a level whose requests all arrive within less than this is a burst that a queue absorbs, not a
# sustained rate: the load is not raised past it (measured on the CPU build: the 128 MiB pool held
# 24 arrivals in 0.5 s, "16x", at a median TTFT of 28 ms, and broke at 8x over 2 s, 2026-12-05)
MIN_LEVEL_SPAN_S = 2.0
# a level lasts at least this long: where the workload's arrivals at a level span less, the workload
# is replayed again after itself (its sessions renamed) until they span this much. A level of a few
# seconds measures how a queue absorbs a burst, and one slow second moves its median: on the CPU
# build a 48-request level of 3 s read a median TTFT of 20 ms and 136 ms at the same load
# (benchmarks/capacity_accuracy.py, 2026-12-05). The issue asks for levels of tens of seconds.
MIN_LEVEL_S = 10.0
MAX_PASSES = 16  # at most this many replays of the workload in one level


@dataclass(frozen=True)
class CapacityPlan:
    """How a capacity bracket runs: the SLOs (``ttft_p90`` -> ms), how tight the bracket must get,
    at most how many levels, where it starts and how low it may go."""

    slos_ms: Mapping[str, float]
    tolerance: float = 0.10
    max_levels: int = 6
    start: float = 1.0
    # below the recorded pace a level takes longer (1/m of the slice's span): two halvings at most,
    # after which "even a quarter of today's traffic breaks the SLO" is the answer
    min_multiplier: float = 1 / 4
    max_failed: int = 0
    # a level must last: above this multiplier the workload's requests would all arrive within
    # MIN_LEVEL_SPAN_S, a burst, not a sustained rate (set from the workload: with_workload_span)
    max_multiplier: float = math.inf
    # a level lasts at least this (seconds of arrivals): the workload replayed again after itself
    min_level_s: float = MIN_LEVEL_S

    def passes(self, span_s: float) -> int:
        """Replays of the workload in one level whose arrivals span ``span_s`` seconds once."""
        if self.min_level_s <= 0 or span_s >= self.min_level_s:
            return 1
        return min(MAX_PASSES, math.ceil(self.min_level_s / max(span_s, 1e-3)))

    def with_workload_span(self, span_s: float) -> CapacityPlan:
        """This plan with its ceiling set so that no level's arrivals span less than MIN_LEVEL_SPAN_S."""
        return replace(self, max_multiplier=max(self.start, span_s / MIN_LEVEL_SPAN_S))

    def __post_init__(self) -> None:
        if not self.slos_ms:
            raise ConfigError(
                "--objective capacity needs at least one --slo (fix: add e.g. --slo ttft_p90=800ms)"
            )
        if not 0 < self.tolerance < 1:
            raise ConfigError(
                f"--capacity-tolerance: {self.tolerance:g} is not between 0 and 1 (fix: e.g. 0.1 for 10%)"
            )
        if not 0 <= self.min_level_s <= 600:
            raise ConfigError(
                f"--capacity-min-level: {self.min_level_s:g} s is not between 0 and 600 (fix: e.g. 10s; 0 replays "
                "the workload once per level)"
            )
        if self.max_levels < 2:
            raise ConfigError(
                f"--capacity-levels: {self.max_levels} cannot bracket anything (fix: 2 or more, default 6)"
            )

    def describe(self) -> str:
        slos = ", ".join(f"{k}<={v:g}ms" for k, v in self.slos_ms.items())
        ceiling = (
            f", up to {self.max_multiplier:.3g}x (no level under {MIN_LEVEL_SPAN_S:g} s)"
            if math.isfinite(self.max_multiplier)
            else ""
        )
        looped = (
            f", each level at least {self.min_level_s:g} s (the workload replayed again after itself)"
            if self.min_level_s > 0
            else ""
        )
        return (
            f"capacity at SLO {slos}: one engine start per trial, load doubled from the workload's pace until a "
            f"level breaks, then bisected to within {self.tolerance:.0%} (at most {self.max_levels} levels"
            f"{ceiling}), the prefix cache emptied before each{looped}"
        )

    def slo_text(self) -> str:
        return ", ".join(f"{k}<={v:g}ms" for k, v in self.slos_ms.items())


@dataclass(frozen=True)
class Level:
    """One load level: its multiplier of the workload's arrivals, the rate offered, its figures,
    whether it held, and why not (one phrase)."""

    multiplier: float
    offered_rps: float
    figures: TrialFigures
    held: bool
    broke: str = ""
    prefix_hit_rate: float | None = None
    notes: tuple[str, ...] = ()
    delivered: float = 1.0  # the rate the replayer sent at, over the planned one (see level_verdict)
    passes: int = 1  # replays of the workload in this level (CapacityPlan.min_level_s)

    def as_dict(self) -> dict[str, Any]:
        f = self.figures
        out: dict[str, Any] = {
            "x": round(self.multiplier, 4),
            "offered_rps": round(self.offered_rps, 4),
            "delivered": round(self.delivered, 3),
            "passes": self.passes,
            "served_rps": round(f.request_throughput, 4),
            "output_throughput": round(f.output_throughput, 3),
            "completed": f.completed,
            "failed": f.failed,
            "saturated": f.saturated,
            "behind_schedule": f.behind_schedule,
            "held": self.held,
            "broke": self.broke,
        }
        for name in ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "itl_p90", "e2el_p90"):
            v = f.percentiles_ms.get(name)
            out[name] = None if v is None or math.isnan(v) else round(float(v), 3)
        if self.prefix_hit_rate is not None:
            out["prefix_hit_rate"] = round(self.prefix_hit_rate, 4)
        if self.notes:
            out["notes"] = list(self.notes)
        return out


@dataclass(frozen=True)
class CapacityResult:
    """The levels measured in order; the highest that held (None: none did) and the lowest that
    broke above it (None: none broke, the bracket is open above)."""

    plan: CapacityPlan
    base_rps: float  # requests/s offered at multiplier 1
    levels: tuple[Level, ...] = field(default_factory=tuple)

    @property
    def held(self) -> Level | None:
        ok = [lv for lv in self.levels if lv.held]
        return max(ok, key=lambda lv: lv.multiplier) if ok else None

    @property
    def broke(self) -> Level | None:
        held = self.held
        floor = held.multiplier if held is not None else -math.inf
        above = [lv for lv in self.levels if not lv.held and lv.multiplier > floor]
        return min(above, key=lambda lv: lv.multiplier) if above else None

    @property
    def capacity_rps(self) -> float:
        held = self.held
        return held.offered_rps if held is not None else 0.0

    @property
    def reported(self) -> Level | None:
        """The level whose figures stand for the trial: the highest that held, else the lowest measured."""
        if self.held is not None:
            return self.held
        return min(self.levels, key=lambda lv: lv.multiplier) if self.levels else None

    def figures(self) -> dict[str, Any]:
        """The keys a trial's figures carry for capacity (``capacity`` is the objective)."""
        held, broke = self.held, self.broke
        return {
            CAPACITY_METRIC: round(self.capacity_rps, 4),
            "capacity_x": None if held is None else round(held.multiplier, 4),
            "capacity_hi": None if broke is None else round(broke.offered_rps, 4),
            "capacity_hi_x": None if broke is None else round(broke.multiplier, 4),
            "capacity_base_rps": round(self.base_rps, 4),
            "capacity_slos": dict(self.plan.slos_ms),
            "capacity_levels": [lv.as_dict() for lv in self.levels],
            "capacity_note": self.note(),
        }

    def bracket_text(self) -> str:
        """``14.2 req/s [held 14.2 (4.00x) - broke 15.9 (4.50x)]`` in one phrase."""
        held, broke = self.held, self.broke
        if held is None:
            low = min(self.levels, key=lambda lv: lv.multiplier) if self.levels else None
            at = (
                f" (the lowest level, {low.multiplier:g}x = {low.offered_rps:.3g} req/s, broke: {low.broke})"
                if low
                else ""
            )
            return f"0 req/s: no level held{at}"
        hi = f"{broke.offered_rps:.3g} req/s ({broke.multiplier:.3g}x)" if broke else "not reached"
        return f"{held.offered_rps:.3g} req/s ({held.multiplier:.3g}x) [held {held.offered_rps:.3g} - broke {hi}]"

    def note(self) -> str:
        """Empty when a level held and one broke above it; else what to change."""
        if self.held is None and self.levels:
            low = min(self.levels, key=lambda lv: lv.multiplier)
            return (
                f"no level held: even {low.multiplier:g}x the workload's arrivals ({low.offered_rps:.3g} req/s) "
                f"broke ({low.broke}); fix: a looser --slo, a configuration with more KV memory, or a lighter "
                "workload"
            )
        broke = self.broke
        if broke is not None and broke.broke.startswith(NOT_OFFERED):
            return (
                f"the capacity is at least this: the level above it was not offered ({broke.broke}); "
                "fix: run autotune on a host with more free CPU than the server's"
            )
        if self.broke is None and self.levels:
            top = self.held.multiplier if self.held else 0.0
            if top >= self.plan.max_multiplier * (1 - 1e-9):
                return (
                    f"no level broke up to {top:.3g}x: the capacity is at least this; a higher load would send "
                    f"the workload's requests in under {MIN_LEVEL_SPAN_S:g} s, a burst rather than a rate "
                    "(fix: a longer --max-duration)"
                )
            return (
                f"no level broke up to {top:g}x within {self.plan.max_levels} "
                "levels: the capacity is at least this (fix: more --capacity-levels, or --speed/--rate higher)"
            )
        return ""


MeasureLevel = Callable[[float], Awaitable[Level]]


async def bracket_capacity(
    plan: CapacityPlan,
    base_rps: float,
    measure: MeasureLevel,
    *,
    after_level: Callable[[CapacityResult], bool] | None = None,
) -> CapacityResult:
    """Bracket, then bisect. ``after_level``: asked after each level with the result so far; True
    stops the search there (the pruner)."""
    result = CapacityResult(plan=plan, base_rps=base_rps)
    m = plan.start
    while len(result.levels) < plan.max_levels:
        level = await measure(m)
        result = replace(result, levels=(*result.levels, level))
        if after_level is not None and after_level(result):
            break
        nxt = next_multiplier(result)
        if nxt is None:
            break
        m = nxt
    return result


def next_multiplier(result: CapacityResult) -> float | None:
    """The next load to measure, or None when the bracket is tight enough or cannot move."""
    plan, held, broke = result.plan, result.held, result.broke
    if broke is None:  # nothing broke yet: double from the highest that held, up to the ceiling
        top = held.multiplier if held else plan.start
        if top >= plan.max_multiplier * (1 - 1e-9):
            return None
        return min(top * 2, plan.max_multiplier)
    if held is None:  # nothing held: halve below the lowest that broke
        low = broke.multiplier / 2
        return low if low >= plan.min_multiplier * (1 - 1e-9) else None
    lo, hi = held.multiplier, broke.multiplier
    if (hi - lo) / lo <= plan.tolerance:
        return None
    return (lo + hi) / 2


NOT_OFFERED = "not offered"  # how a level that the replayer could not send at its rate begins its reason
DELIVERED_SHARE = 0.9  # a level counts only if the replayer sent its requests at least this fast


def delivered_share(timings: Sequence[Any]) -> float:
    """How fast the replayer sent a level's requests against its plan: the planned span of their
    send times over the actual one (1.0: on plan; 0.5: it took twice as long to send them)."""
    if len(timings) < 2:
        return 1.0
    planned = max(t.scheduled for t in timings) - min(t.scheduled for t in timings)
    actual = max(t.sent for t in timings) - min(t.sent for t in timings)
    return 1.0 if actual <= 0 or planned <= 0 else min(1.0, planned / actual)


def level_verdict(
    figures: TrialFigures, slos_ms: Mapping[str, float], max_failed: int = 0, *, delivered: float = 1.0
) -> tuple[bool, str]:
    """(held, why not): the load was offered (the replayer sent the requests at least
    ``DELIVERED_SHARE`` as fast as planned: ``delivered``), every SLO met, no saturation, at most
    ``max_failed`` failed requests. A load the replayer could not offer is never a capacity: on a
    busy host the client, not the server, may be what runs out."""
    broke: list[str] = []
    if figures.completed == 0:
        return False, "no request succeeded"
    if delivered < DELIVERED_SHARE:
        broke.append(
            f"{NOT_OFFERED}: the replayer sent its requests at {delivered:.0%} of the planned rate (its host "
            "could not send faster)"
        )
    if figures.failed > max_failed:
        broke.append(f"{figures.failed} requests failed")
    for name, limit in slos_ms.items():
        try:
            value = figures.metric(name)
        except KeyError:
            value = math.nan
        if math.isnan(value):
            broke.append(f"{name} not measured")
        elif value > limit:
            broke.append(f"{name} {value:,.0f} ms > {limit:g} ms")
    if figures.saturated:
        broke.append("saturated")
    return not broke, "; ".join(broke)


def scaled_arrival(spec: ArrivalSpec, multiplier: float) -> ArrivalSpec:
    """The same arrivals ``multiplier`` times faster: the file's timestamps compressed, or the rate scaled."""
    if spec.mode == "timestamps":
        return replace(spec, speed=spec.speed * multiplier)
    if spec.mode in ("poisson", "gamma"):
        assert spec.rate is not None
        return replace(spec, rate=spec.rate * multiplier)
    raise ConfigError(
        "--objective capacity: a closed loop (--concurrency) cannot be offered more load "
        "(fix: replay the file's timestamps, or pass --rate N)"
    )


def arrival_span(workload: Workload, spec: ArrivalSpec) -> float:
    """Seconds from the first session's arrival to the last's at multiplier 1 under ``spec``."""
    offsets = plan_offsets([s[0].timestamp for s in workload.sessions().values()], spec)
    return float(np.max(offsets)) if offsets is not None and len(offsets) else 0.0


def base_request_rate(workload: Workload, spec: ArrivalSpec, *, where: str = "--workload") -> float:
    """Requests per second the workload offers at multiplier 1 under ``spec``; a workload too short
    to bracket is refused (fewer than MIN_LEVEL_REQUESTS requests, or all arriving at one instant)."""
    scaled_arrival(spec, 1.0)  # a closed loop is refused here, before any engine starts
    n = len(workload.requests)
    if n < MIN_LEVEL_REQUESTS:
        raise ConfigError(
            f"{where}: {n} requests are too few to bracket a capacity (fix: at least {MIN_LEVEL_REQUESTS}; "
            "a longer --max-duration or the whole file)"
        )
    sessions = len(workload.sessions())
    span = arrival_span(workload, spec)
    if span <= 0:
        raise ConfigError(
            f"{where}: every session arrives at the same instant, so no load can be scaled "
            "(fix: a workload with timestamps spread in time, or --rate N)"
        )
    # sessions arrive over ``span``; each brings its turns: requests/s = turns per session x sessions/s
    return (n / sessions) * (sessions - 1) / span if sessions > 1 else n / span


def median_capacity(values: Sequence[float]) -> float:
    return float(np.median(values)) if values else math.nan
