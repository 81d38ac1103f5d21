"""A capacity trial on one started engine: the workload replayed at a sequence of load levels
(:func:`autotune.bench.bracket_capacity` picks them), the prefix cache emptied before every level so
that a level never measures the one before it, each level judged against the SLOs.

After each level the study's listener hears the bracket's upper end so far (the lowest load that
broke), so the pruner can stop a trial that cannot beat the best one's capacity.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import httpx

from autotune.bench import (
    ArrivalSpec,
    MetricNames,
    MetricsDelta,
    QueueWatch,
    ReplayTarget,
    RequestTiming,
    TrialFigures,
    replay,
    scrape_metrics,
    summarize,
)
from autotune.bench._capacity import (
    CAPACITY_METRIC,
    CapacityPlan,
    CapacityResult,
    Level,
    arrival_span,
    bracket_capacity,
    delivered_share,
    level_verdict,
    scaled_arrival,
)
from autotune.bench._replay import History
from autotune.study import TrialListener
from autotune.trial._passes import reset_prefix_cache
from autotune.workload import Workload

__all__ = ["CapacityRun", "LevelContext", "measure_level", "run_levels"]

log = logging.getLogger(__name__)


@dataclass
class CapacityRun:
    """What the levels measured: the bracket, every request's timing (all levels), the notes."""

    result: CapacityResult
    timings: list[RequestTiming] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pruned: str | None = None

    @property
    def figures(self) -> TrialFigures | None:
        """The figures that stand for the trial: those of the highest level that held (else the lowest)."""
        level = self.result.reported
        return level.figures if level is not None else None


@dataclass(frozen=True)
class LevelContext:
    client: httpx.AsyncClient
    target: ReplayTarget
    base_url: str
    api_key: str | None
    workload: Workload
    arrival: ArrivalSpec
    history: History
    request_slos: Mapping[str, float]
    metric_names: MetricNames
    metrics_path: str
    host_sources: tuple[str, ...]


async def measure_level(
    ctx: LevelContext,
    plan: CapacityPlan,
    base_rps: float,
    m: float,
    *,
    reset: bool = True,
    timings: list[RequestTiming] | None = None,
) -> Level:
    """One level: the prefix cache emptied (unless ``reset`` is off: a test's control), the
    workload replayed at ``m`` times its arrivals (again after itself until the level lasts
    ``plan.min_level_s``), judged against the SLOs; its requests' timings appended to ``timings``.
    A refused reset is the level's note."""
    notes: tuple[str, ...] = ()
    if reset:
        refused = await reset_prefix_cache(ctx.client, ctx.base_url, ctx.api_key)
        if refused is not None:
            notes = (f"the prefix cache was not emptied before this level: {refused}",)
    arrival = scaled_arrival(ctx.arrival, m)
    passes = plan.passes(arrival_span(ctx.workload, arrival))
    workload = ctx.workload.repeated(passes)
    before = await scrape_metrics(ctx.client, ctx.base_url, ctx.metric_names, ctx.metrics_path)
    async with QueueWatch(ctx.base_url, ctx.metrics_path) as watch:
        result = await replay(ctx.client, ctx.target, workload, arrival, history=ctx.history)
    after = await scrape_metrics(ctx.client, ctx.base_url, ctx.metric_names, ctx.metrics_path)
    if timings is not None:
        timings.extend(result.timings)
    figures = summarize(
        result.timings,
        result.duration_s,
        slos_ms=ctx.request_slos or None,
        arrival=arrival,
        queue=watch.result(),
    )
    delta = (
        MetricsDelta.between(before, after, ctx.host_sources, names=ctx.metric_names)
        if before and after
        else None
    )
    delivered = delivered_share(result.timings)
    held, broke = level_verdict(figures, plan.slos_ms, plan.max_failed, delivered=delivered)
    log.info("level %.3gx (%.3g req/s): %s", m, base_rps * m, "held" if held else f"broke: {broke}")
    return Level(
        multiplier=m,
        offered_rps=base_rps * m,
        figures=figures,
        held=held,
        broke=broke,
        prefix_hit_rate=delta.prefix_hit_rate if delta is not None else None,
        notes=notes,
        delivered=delivered,
        passes=passes,
    )


async def run_levels(
    ctx: LevelContext, plan: CapacityPlan, base_rps: float, listener: TrialListener | None
) -> CapacityRun:
    """Bracket the capacity on the engine at ``ctx.base_url``; each level replays the whole
    workload at its multiple of ``ctx.arrival``."""
    run = CapacityRun(result=CapacityResult(plan=plan, base_rps=base_rps))
    resets_refused: list[str] = []

    async def measure(m: float) -> Level:
        level = await measure_level(ctx, plan, base_rps, m, timings=run.timings)
        if level.notes:
            resets_refused.append(level.notes[0])
        if listener is None:
            return level
        # a group's engines wait for each other here: the level holds where every model held it
        held, broke = await asyncio.to_thread(listener.level, m, level.held, level.broke)
        return level if (held, broke) == (level.held, level.broke) else replace(level, held=held, broke=broke)

    def after_level(result: CapacityResult) -> bool:
        run.result = result
        if listener is None:
            return False
        broke = result.broke
        upper = broke.offered_rps if broke is not None else math.inf
        if math.isinf(upper):
            return False
        # the upper end of the bracket so far: the pruner holds it against the best trial's capacity
        why = listener.checkpoint(len(result.levels), {CAPACITY_METRIC: upper})
        if why is not None:
            run.pruned = why
            return True
        return False

    run.result = await bracket_capacity(plan, base_rps, measure, after_level=after_level)
    if resets_refused:
        run.notes.append(
            f"{len(resets_refused)} of {len(run.result.levels)} levels ran without emptying the prefix cache "
            f"({resets_refused[0].split(': ', 1)[-1]}): a level may have measured the cache of the level before it "
            "(fix: run vLLM with VLLM_SERVER_DEV_MODE=1, which autotune does for the engines it starts)"
        )
    note = run.result.note()
    if note:
        run.notes.append(note)
    return run
