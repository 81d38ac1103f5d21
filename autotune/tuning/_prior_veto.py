"""The prior's vetoes: what it says when it does not launch a configuration.

A region the prior predicts no better (a host pool that cannot add prefix hits) or far worse
(prefix caching off without a pool while caching on predicts ``FAR_WORSE`` of prompt tokens as
hits) is measured once, as a check; later proposals in it are recorded, not launched. The reason
names what the prior computed: the working set, the GPU KV, the pool, the predicted hit shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune.space import SearchSpace
from autotune.study import read_record

__all__ = ["FAR_WORSE", "checked_by", "no_gain_reason"]

FAR_WORSE = 0.25  # predicted prefix hits that prefix caching off (without a pool) gives up: checked once


def no_gain_reason(p: Mapping[str, Any], caching: bool) -> str:
    gpu, ws, with_pool = p["gpu_kv_tokens"], p["working_set_tokens"], p.get("prefix_hit_with_pool", 0.0)
    pool = p.get("pool_tokens", 0)
    if not caching:
        return (
            f"offload cannot add prefix hits here: with prefix caching off the GPU keeps no prefixes, and the "
            f"host pool ({pool:,} tokens) predicts {with_pool:.1%} of prompt tokens (working set {ws:,} tokens)"
        )
    if ws <= gpu:
        return (
            f"offload cannot add prefix hits here: the working set ({ws:,} tokens) fits the GPU KV ({gpu:,} tokens; "
            f"predicted {p['prefix_hit_gpu']:.1%} without the pool, {with_pool:.1%} with it)"
        )
    return (
        f"offload cannot add prefix hits here: the working set ({ws:,} tokens) exceeds the GPU KV ({gpu:,} tokens), "
        f"but the pool ({pool:,} tokens) predicts {with_pool:.1%} against {p['prefix_hit_gpu']:.1%} without it"
    )


def checked_by(study: optuna.Study, space: SearchSpace, *, pool_trial: bool) -> int | None:
    """The first measured trial in the region (offload on; or caching off without a pool), if any.
    The parameters are found by role in ``space`` (trials store them under the space's names)."""
    pool, caching = space.roles.kv_pool, space.roles.prefix_caching
    for t in study.get_trials(deepcopy=False):
        if t.state not in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
            continue
        has_pool = pool is not None and bool(float(t.params.get(pool) or 0))
        caching_off = caching is not None and t.params.get(caching) is False
        in_region = has_pool if pool_trial else (not has_pool and caching_off)
        if in_region:
            rec = read_record(t)
            if rec.failure != "prior" and rec.duplicate_of is None:
                return t.number
    return None
