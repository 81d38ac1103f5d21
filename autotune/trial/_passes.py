"""Repeated passes on one started engine: start-up dominates a trial's cost, so a trial may replay
its workload several times on the same server, emptying the prefix cache between passes, and report
the median of its passes (with their spread) instead of one lucky or unlucky replay.

The prefix cache is emptied with vLLM's ``POST /reset_prefix_cache?reset_external=true`` (the
connector's tier too, e.g. the CPU offload pool), which exists only when the server runs with
``VLLM_SERVER_DEV_MODE=1``. Each pass's prefix-hit rate is recorded; a later pass hitting far more
than the first says the reset did not empty a tier, and the trial says so.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from autotune.bench import MetricsDelta, TrialFigures
from autotune.errors import ConfigError

__all__ = [
    "AUTO_PASS_BUDGET",
    "DEV_MODE_ENV",
    "MAX_AUTO_PASSES",
    "PassPlan",
    "PassResult",
    "combine_passes",
    "parse_passes",
    "reset_leak",
    "reset_prefix_cache",
    "spread",
]

log = logging.getLogger(__name__)

DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}  # exposes /reset_prefix_cache (bound to 127.0.0.1 here)
RESET_PATH = "/reset_prefix_cache"
AUTO_PASS_BUDGET = 0.5  # auto: extra passes may cost at most this share of a one-pass trial
MAX_AUTO_PASSES = 5
LEAK_MARGIN = 0.10  # a later pass may hit this much more (absolute) than the first before we call it a leak


@dataclass(frozen=True)
class PassPlan:
    """``count``: passes per trial; ``None``: auto (as many as fit in ``budget`` x a one-pass trial)."""

    count: int | None = None
    budget: float = AUTO_PASS_BUDGET

    @property
    def repeated(self) -> bool:
        return self.count is None or self.count > 1

    def passes_after_first(self, startup_s: float, warmup_s: float, first_pass_s: float) -> int:
        """How many passes in all, decided once the first pass is measured."""
        if self.count is not None:
            return self.count
        if first_pass_s <= 0:
            return 1
        one_pass_trial = startup_s + warmup_s + first_pass_s
        extra = math.floor(self.budget * one_pass_trial / first_pass_s)
        return max(1, min(1 + extra, MAX_AUTO_PASSES))

    def describe(self) -> str:
        if self.count is not None:
            return f"{self.count} pass{'es' if self.count != 1 else ''} per trial"
        return f"auto passes per trial (up to {MAX_AUTO_PASSES}, extra passes within {self.budget:.0%} of a one-pass trial)"


def parse_passes(text: str) -> PassPlan:
    """``auto`` or a count from 1 to 20 (``--passes``)."""
    if text.strip().lower() == "auto":
        return PassPlan()
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 20:
        raise ConfigError(f"--passes: {text!r} is not 'auto' or a count from 1 to 20 (fix: e.g. --passes 3)")
    return PassPlan(count=n)


@dataclass(frozen=True)
class PassResult:
    figures: TrialFigures
    metrics: MetricsDelta | None
    pruned: str | None = None  # the pruner stopped this pass: why

    def summary(self, objective: str) -> dict[str, Any]:
        """What the trial record keeps of one pass."""
        out: dict[str, Any] = {
            "completed": self.figures.completed,
            "failed": self.figures.failed,
            "duration_s": round(self.figures.duration_s, 3),
        }
        for name in dict.fromkeys((objective, "ttft_p50", "ttft_p90", "tpot_p50", "output_throughput")):
            try:
                value = self.figures.metric(name)
            except KeyError:
                continue
            out[name] = None if math.isnan(value) else round(value, 3)
        if self.metrics is not None:
            for name in ("prefix_hit_rate", "host_hit_rate"):
                rate = self.metrics.as_dict().get(name)
                if rate is not None:
                    out[name] = round(float(rate), 4)
        if self.pruned:
            out["pruned"] = self.pruned
        return out


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def combine_passes(passes: Sequence[TrialFigures]) -> TrialFigures:
    """One set of figures for the trial: the median of the passes for every rate and percentile,
    the sums of counts (requests served, failed), the worst schedule lag."""
    if len(passes) == 1:
        return passes[0]
    behind = [p for p in passes if p.behind_schedule]
    saturated = [p for p in passes if p.saturated]
    lagging = behind[0] if behind else passes[0]  # the pass whose schedule the trial reports
    return TrialFigures(
        completed=sum(p.completed for p in passes),
        failed=sum(p.failed for p in passes),
        duration_s=_median([p.duration_s for p in passes]),
        request_throughput=_median([p.request_throughput for p in passes]),
        output_throughput=_median([p.output_throughput for p in passes]),
        total_output_tokens=sum(p.total_output_tokens for p in passes),
        percentiles_ms=_median_per_key([p.percentiles_ms for p in passes]),
        mean_ms=_median_per_key([p.mean_ms for p in passes]),
        goodput=_median_present([p.goodput for p in passes]),
        lag_p99_ms=max(p.lag_p99_ms for p in passes),
        behind_schedule=bool(behind),
        schedule_note=lagging.schedule_note,
        failures=_failure_counts(passes),
        lag_max_ms=max(p.lag_max_ms for p in passes),
        lag_tolerance_ms=lagging.lag_tolerance_ms,
        saturated=bool(saturated),
        saturation_note=saturated[0].saturation_note if saturated else "",
    )


def _median_present(values: Sequence[float | None]) -> float | None:
    """The median of the values present (None: none is)."""
    present = [v for v in values if v is not None]
    return _median(present) if present else None


def _median_per_key(figures: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """For every key of any pass, the median over the passes (a pass without it does not count)."""
    keys = dict.fromkeys(k for f in figures for k in f)
    return {k: _median([f.get(k, math.nan) for f in figures]) for k in keys}


def _failure_counts(passes: Sequence[TrialFigures]) -> dict[str, int]:
    """The failed requests of every pass by cause, the most frequent first."""
    failures: dict[str, int] = {}
    for p in passes:
        for why, n in p.failures.items():
            failures[why] = failures.get(why, 0) + n
    return dict(sorted(failures.items(), key=lambda kv: -kv[1]))


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median of the passes' objective; None with fewer than two finite values."""
    finite = [v for v in values if v is not None and not math.isnan(v)]
    if len(finite) < 2:
        return None
    mid = float(np.median(finite))
    return (max(finite) - min(finite)) / mid if mid else None


__all__ += ["spread"]


def reset_leak(summaries: Sequence[Mapping[str, Any]]) -> str | None:
    """A later pass hitting much more than the first: the reset left a cache tier full."""
    if len(summaries) < 2:
        return None
    first = summaries[0].get("prefix_hit_rate")
    if first is None:
        return None
    for k, s in enumerate(summaries[1:], start=2):
        hit = s.get("prefix_hit_rate")
        if hit is not None and hit > first + LEAK_MARGIN:
            return (
                f"pass {k} hit {hit:.1%} of prompt tokens in the prefix cache against {first:.1%} in pass 1: "
                "the reset between passes did not empty every cache tier, so later passes were easier"
            )
    return None


async def reset_prefix_cache(
    client: httpx.AsyncClient, base_url: str, api_key: str | None, *, attempts: int = 20, wait_s: float = 0.25
) -> str | None:
    """Empty the engine's prefix cache (its connector's tier too); None when done, else why not.

    vLLM refuses (``success: false``) while blocks are held, e.g. by in-flight offload transfers
    right after a pass: retried for ``attempts x wait_s`` seconds."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = base_url + RESET_PATH
    last = "no answer"
    for _ in range(attempts):
        try:
            resp = await client.post(url, params={"reset_external": "true"}, headers=headers, timeout=30.0)
        except httpx.HTTPError as exc:
            return f"POST {RESET_PATH} failed: {type(exc).__name__}: {exc}"
        if resp.status_code == 404:
            return f"POST {RESET_PATH} answered 404 (the server needs VLLM_SERVER_DEV_MODE=1)"
        if resp.status_code != 200:
            return f"POST {RESET_PATH} answered HTTP {resp.status_code}: {resp.text[:200]}"
        try:
            body = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("success", True):
            return None  # older servers answer 200 without a body
        last = "success: false (blocks still held)"
        await asyncio.sleep(wait_s)
    return f"POST {RESET_PATH} kept answering {last} for {attempts * wait_s:.0f} s"
