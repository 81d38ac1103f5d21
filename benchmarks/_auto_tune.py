"""vLLM's ``benchmarks/auto_tune/auto_tune.sh`` (vllm-project/vllm, read at 01277f9cd6f7), the peer's
method that ``capacity_vs_grid.py`` sets beside the tool's, on this project's engine and replayer.

What auto_tune.sh does: it grids ``NUM_SEQS_LIST`` x ``NUM_BATCHED_TOKENS_LIST`` (``--max-num-seqs``
outer, ``--max-num-batched-tokens`` inner). Per cell (``run_benchmark``) it starts the server and runs
``vllm bench serve`` at request rate inf; if ``P99 E2EL <= MAX_LATENCY_ALLOWED_MS`` there, the cell's
rate is inf. Otherwise it sets the rate to ``int(throughput at inf) + 1`` and, while the rate is above
0, empties the prefix cache (``POST /reset_prefix_cache``), sleeps 5 s and benchmarks at that rate,
stopping at the first rate that meets the limit, else stepping down 1 req/s. The cell's figure is the
request throughput measured at the rate that held; the best cell is the first with the highest
throughput (a strictly higher one replaces it). After each cell: ``pkill -if vllm; sleep 10``.
Before the grid it starts the server with the last cell's flags to find the highest
``--gpu-memory-utilization`` from 0.98 down that starts; after it, it starts the best cell once
more to profile it.

Adapted here, and only here:

- the requests: the user's workload (the tool's slice of it), replayed by this project's replayer at
  each rate with Poisson arrivals (``vllm bench serve --request-rate R`` draws Poisson arrivals,
  burstiness 1) and all at once at inf, instead of ``--dataset-name random`` with 1,000 prompts at inf
  and 100 per step: the same requests at every rate and in every cell;
- the latency limit: :class:`GridPlan.limit_ms` (the comparison passes the tool's SLO; auto_tune's own
  is ``e2el_p99``). As in auto_tune.sh, that limit alone decides: no saturation or failed-request
  test. The tool's own verdict at each level is recorded beside it (``tool_verdict``);
- the memory probe: on the CPU build the KV pool is the fixed ``--kv-cache-memory-bytes`` for every
  configuration, so the probe cannot find anything; its one start of the last cell is still made and
  counted (``memory_probe``: off, neither). The final profiling run is left out (not part of the search);
- each engine gets the tool's warm-up (2 requests like the workload's) before its first level, as a
  trial's engine does.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as c
import _levels

from autotune.bench import ArrivalSpec, TrialFigures
from autotune.bench._capacity import CapacityPlan, Level
from autotune.errors import EngineCrashed, EngineStartError
from autotune.space import EngineConfig
from autotune.trial._capacity import measure_level
from autotune.tuning import TuningSetup

SOURCE = "vllm-project/vllm benchmarks/auto_tune/auto_tune.sh @ 01277f9cd6f7"
SEQS, TOKENS = "max_num_seqs", "max_num_batched_tokens"


@dataclass(frozen=True)
class GridPlan:
    """auto_tune.sh's settings: its two lists, the latency limit, the rate step and its sleeps."""

    num_seqs: Sequence[int]
    num_batched_tokens: Sequence[int]
    limit_ms: Mapping[str, float]  # metric -> ms, e.g. {"e2el_p99": 2000.0}: all must hold
    step: float = 1.0  # req/s
    settle_s: float = 5.0  # after each cache reset
    cell_pause_s: float = 10.0  # after each cell
    memory_probe: bool = True

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(s, t) for s in self.num_seqs for t in self.num_batched_tokens]


def run_grid(setup: TuningSetup, plan: GridPlan, work: Path) -> dict[str, Any]:
    """Every cell of ``plan`` on ``setup``'s engine, workload and fixed flags; the best cell."""
    load_start = c.load_average()
    t0 = time.monotonic()
    probe = _probe(setup, *plan.cells[-1], work) if plan.memory_probe else None
    rows, slept = [], 0.0
    for seqs, tokens in plan.cells:
        rows.append(_cell(setup, seqs, tokens, plan, work))
        time.sleep(plan.cell_pause_s)  # auto_tune.sh: pkill -if vllm; sleep 10
        slept += rows[-1]["slept_s"] + plan.cell_pause_s
    wall = time.monotonic() - t0
    best = None
    for row in rows:  # auto_tune.sh: a strictly higher throughput replaces the best
        if row["meets"] and (best is None or row["throughput"] > best["throughput"]):
            best = row
    return {
        "method": f"grid of {len(plan.num_seqs)} x {len(plan.num_batched_tokens)}, rate inf then down by "
        f"{plan.step:g} req/s ({SOURCE})",
        "limit": dict(plan.limit_ms),
        "num_seqs": list(plan.num_seqs),
        "num_batched_tokens": list(plan.num_batched_tokens),
        "arrival": f"poisson (seed {setup.choices.seed}) at each rate, all at once at inf",
        "memory_probe": probe,
        "cells": rows,
        "best": None if best is None else {k: best[k] for k in (SEQS, TOKENS, "rate", "throughput")},
        "engine_starts": sum(r["started"] for r in rows) + (probe is not None),
        "wall_s": wall,
        "slept_s": slept,
        "load_average": {"start": load_start, "end": c.load_average()},
    }


def _rendered(setup: TuningSetup, seqs: int, tokens: int) -> EngineConfig:
    return setup.config({SEQS: seqs, TOKENS: tokens})


def _probe(setup: TuningSetup, seqs: int, tokens: int, work: Path) -> dict[str, Any]:
    """auto_tune.sh's memory probe: ``start_server`` with the last cell's flags (here, once)."""
    t0 = time.monotonic()
    rendered = _rendered(setup, seqs, tokens)
    try:
        with _levels.started_engine(setup, rendered, work / "probe.log", cache_dir=work / "cache"):
            pass
    except (EngineStartError, EngineCrashed) as exc:
        return {"started": False, "reason": str(exc), "wall_s": time.monotonic() - t0}
    return {"started": True, SEQS: seqs, TOKENS: tokens, "wall_s": time.monotonic() - t0}


def _cell(setup: TuningSetup, seqs: int, tokens: int, plan: GridPlan, work: Path) -> dict[str, Any]:
    """auto_tune.sh's ``run_benchmark``: one start, rate inf, then down until the limit holds."""
    row: dict[str, Any] = {SEQS: seqs, TOKENS: tokens, "started": False, "meets": False, "rate": None}
    row.update(throughput=0.0, levels=[], slept_s=0.0)
    t0 = time.monotonic()
    log = work / f"cell-{seqs}-{tokens}.log"
    try:
        with _levels.started_engine(
            setup, _rendered(setup, seqs, tokens), log, cache_dir=work / "cache"
        ) as proc:
            row.update(started=True, startup_s=proc.startup_s)
            asyncio.run(_rates(setup, proc.base_url, plan, row))
            proc.check_alive()
    except (EngineStartError, EngineCrashed) as exc:  # auto_tune.sh: "does not meet latency requirement"
        c.log.warning("cell %d x %d: engine failed: %s", seqs, tokens, exc)
        row.update(failure=exc.failure, reason=str(exc), meets=False, rate=None, throughput=0.0)
    row["wall_s"] = time.monotonic() - t0
    verdict = f"holds at rate {row['rate']}, throughput {row['throughput']:.3g} req/s"
    c.log.info("cell %d x %d: %s", seqs, tokens, verdict if row["meets"] else "does not meet the limit")
    return row


async def _rates(setup: TuningSetup, base_url: str, plan: GridPlan, row: dict[str, Any]) -> None:
    capacity = CapacityPlan(slos_ms=dict(plan.limit_ms))  # only for the tool's own verdict, kept beside
    arrival = ArrivalSpec(mode="poisson", rate=1.0, seed=setup.choices.seed)
    # the nominal req/s of 1 session/s: its requests per session (rag: 1)
    per_session = len(setup.workload.requests) / len(setup.workload.sessions())
    async with _levels.level_context(setup, base_url, arrival) as ctx:

        async def at(rate: float) -> Level:  # ``rate`` requests/s, as vllm bench serve's --request-rate
            level = await measure_level(ctx, capacity, per_session, rate / per_session)
            row["levels"].append(_level_row(rate, level, plan.limit_ms))
            return level

        level = await at(math.inf)
        if _meets(level.figures, plan.limit_ms):
            row.update(meets=True, rate="inf", throughput=level.figures.request_throughput)
            return
        rate = float(int(level.figures.request_throughput) + 1)  # auto_tune.sh: ${throughput%.*} + 1
        while rate > 0:
            # auto_tune.sh: curl -X POST .../reset_prefix_cache; sleep 5 (measure_level resets the cache)
            await asyncio.sleep(plan.settle_s)
            row["slept_s"] += plan.settle_s
            level = await at(rate)
            if _meets(level.figures, plan.limit_ms):
                row.update(meets=True, rate=rate, throughput=level.figures.request_throughput)
                return
            rate -= plan.step


def _meets(figures: TrialFigures, limit_ms: Mapping[str, float]) -> bool:
    """auto_tune.sh's test (``e2el <= MAX_LATENCY_ALLOWED_MS``) with the given limits, and nothing else."""
    if figures.completed == 0:
        return False
    return all(not math.isnan(v := _metric(figures, k)) and v <= limit for k, limit in limit_ms.items())


def _metric(figures: TrialFigures, name: str) -> float:
    try:
        return float(figures.metric(name))
    except KeyError:
        return math.nan


def _level_row(rate: float, level: Level, limit_ms: Mapping[str, float]) -> dict[str, Any]:
    """One rate of a cell: the grid's verdict and the limit's figures, then the level's own figures
    (its multiplier and offered load are the rate here; its held/broke, the tool's verdict)."""
    own = {k: v for k, v in level.as_dict().items() if k not in ("x", "offered_rps", "held", "broke")}
    return {
        "rate": "inf" if math.isinf(rate) else rate,
        "meets": _meets(level.figures, limit_ms),
        **{name: _metric(level.figures, name) for name in limit_ms},
        "tool_verdict": "held" if level.held else f"broke: {level.broke}",
        **own,
    }
