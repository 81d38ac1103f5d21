"""The least-squares costs refined through the simulation itself.

The linear fit (:func:`~autotune.predict.fit_costs`) reads prefill costs off requests that found
the engine idle. Under load there are few or none, and in a replay whose prompts all compute the
same number of tokens (a starved cache: no hits) the per-token cost and the fixed overhead cannot be
told apart; the fit then puts the queue into the overhead, and every other configuration inherits
it. Here each measured replay is simulated again at its own send times and configuration, and the
overhead and the per-token prefill cost (the host-pool load cost too, when measured) are scaled, one
at a time, while the simulated TTFTs get closer to the measured ones: the mean squared log error per
request, plus the p50 and p90 of each replay. A coordinate search in shrinking multiplicative steps,
at most :data:`MAX_EVALS` simulations of every replay. The refined costs are kept only where they
replay the measurements clearly better (:data:`KEEP_LINEAR`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from autotune.predict._costs import EngineCosts
from autotune.predict._kv import KvCache
from autotune.predict._simulate import EngineLimits, simulate

__all__ = ["RefitRun", "refine_costs"]

MAX_EVALS = 60
KEEP_LINEAR = 0.5  # the refined costs replace the linear fit's when their loss is below this share of its
_STEPS = (2.0, 1.4, 1.15, 1.05)
_FLOOR_S = 1e-3  # TTFTs compared in log space above this floor


@dataclass(frozen=True)
class RefitRun:
    """One measured replay as the refinement simulates it: its send times (workload order), output
    tokens, a fresh cache of its configuration, its limits, and the measured TTFTs (s, NaN: failed)."""

    arrivals: np.ndarray
    outputs: np.ndarray
    cache: Callable[[], KvCache]
    limits: EngineLimits
    ttft: np.ndarray


def _loss(costs: EngineCosts, runs: Sequence[RefitRun]) -> float:
    total = 0.0
    for r in runs:
        sim = simulate(r.arrivals, r.outputs, r.cache(), costs, r.limits).ttft
        ok = np.isfinite(r.ttft) & np.isfinite(sim)
        if not ok.any():
            continue
        s, m = np.maximum(sim[ok], _FLOOR_S), np.maximum(r.ttft[ok], _FLOOR_S)
        e = np.log(s / m)
        total += float(np.mean(e**2))
        for q in (50, 90):
            total += math.log(np.percentile(s, q) / np.percentile(m, q)) ** 2
    return total


def _start(costs: EngineCosts, runs: Sequence[RefitRun]) -> EngineCosts:
    """A start the search can scale: no cost at 0 (a dropped coefficient), and an overhead no larger
    than the fastest measured TTFT (a larger one is the queue, which the simulation adds itself)."""
    fastest = min((float(np.nanmin(r.ttft)) for r in runs if np.isfinite(r.ttft).any()), default=0.01)
    overhead = min(max(costs.overhead_s, 1e-4), max(fastest, 1e-4))
    prefill = costs.prefill_s_per_token
    if prefill <= 0:
        tokens = max((float(r.cache().chains.prompt.mean()) for r in runs), default=1000.0)
        prefill = max(fastest - overhead, fastest / 2) / max(tokens, 1.0)
    return dataclasses.replace(costs, overhead_s=overhead, prefill_s_per_token=prefill)


def _search(start: EngineCosts, names: Sequence[str], runs: Sequence[RefitRun]) -> tuple[EngineCosts, float]:
    best, best_loss, evals = start, _loss(start, runs), 1
    for step in _STEPS:
        improved = True
        while improved and evals < MAX_EVALS:
            improved = False
            for name in names:
                for factor in (step, 1 / step):
                    trial = dataclasses.replace(best, **{name: getattr(best, name) * factor})
                    loss = _loss(trial, runs)
                    evals += 1
                    if loss < best_loss - 1e-9:
                        best, best_loss, improved = trial, loss, True
                        break
    return best, best_loss


def refine_costs(costs: EngineCosts, runs: Sequence[RefitRun]) -> EngineCosts:
    """``costs`` with overhead, prefill (and host-pool) costs fitted through the simulation: searched
    from the linear fit (when none of them is 0) and from :func:`_start`, the better kept."""
    runs = [r for r in runs if np.isfinite(r.ttft).any()]
    if not runs:
        return costs
    names = ["overhead_s", "prefill_s_per_token"] + (["host_s_per_token"] if costs.host_s_per_token else [])
    starts = [_start(costs, runs)]
    if all(getattr(costs, n) > 0 for n in names):
        starts.append(costs)
    refined, loss = min((_search(s, names, runs) for s in starts), key=lambda r: r[1])
    # the linear fit stands unless it clearly fails to replay what was measured (a queue taken for
    # overhead): in-sample noise alone must not trade a well-identified cost for a better-fitting one
    return refined if loss < KEEP_LINEAR * _loss(costs, runs) else costs
