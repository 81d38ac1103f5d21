"""The prior's view of ``max-num-seqs``: how many requests the workload keeps in flight.

A server runs at most ``max-num-seqs`` requests at once; the rest wait in its queue. So a value
below the concurrency the workload reaches makes requests queue by construction, and the prior
drops such values before the study starts (like pool sizes above the working set). The peak is a
lower bound: a closed loop keeps exactly its concurrency in flight; open-loop arrivals (the file's
timestamps, or a rate) are counted as overlapping intervals of at least ``MIN_STEP_S`` a generated
token (faster than any GPU decodes under load), so the real peak is at least that high.

KV capacity bounds concurrency from the other side: the KV cache holds about
``KV tokens / mean request length`` requests at once; above that, more sequences only preempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.bench import ArrivalSpec, plan_offsets
from autotune.space import Parameter, SearchSpace
from autotune.workload import Workload

__all__ = ["MIN_STEP_S", "Concurrency", "kv_concurrency", "peak_concurrency", "seqs_plan"]

MIN_STEP_S = 0.005  # seconds a generated token takes at least (a lower bound on every GPU under load)


@dataclass(frozen=True)
class Concurrency:
    peak: int  # requests in flight at once, at least
    how: str  # how it was computed, for the prior's line


def _max_overlap(starts: np.ndarray, durations: np.ndarray) -> int:
    events = sorted(
        [(float(s), 1) for s in starts] + [(float(s + d), -1) for s, d in zip(starts, durations, strict=True)]
    )
    # an end at the same instant as a start frees its slot first (sorted: -1 before +1)
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def peak_concurrency(workload: Workload, arrival: ArrivalSpec | None) -> Concurrency | None:
    """The concurrency this replay reaches (a lower bound), or None when the arrivals are unknown."""
    sessions = list(workload.sessions().values())
    if arrival is None or not sessions:
        return None
    if arrival.mode == "closed":
        peak = min(arrival.concurrency or 1, len(sessions))
        return Concurrency(peak, f"closed loop: {peak} sessions in flight at all times")
    try:
        starts = plan_offsets([s[0].timestamp for s in sessions], arrival)
    except Exception:  # timestamps missing: the replay refuses it with its own message
        return None
    if starts is None:
        return None
    durations = np.asarray([sum(r.max_tokens for r in s) * MIN_STEP_S for s in sessions], dtype=float)
    peak = max(1, _max_overlap(np.asarray(starts, dtype=float), durations))
    return Concurrency(
        peak,
        f"{arrival.describe()}: at least {peak} requests in flight (each at least {MIN_STEP_S * 1000:g} ms "
        "a generated token)",
    )


def kv_concurrency(kv_tokens: int, prompt_lengths: Sequence[int], workload: Workload) -> int:
    """Requests of the workload's mean length (prompt + max_tokens) the KV cache holds at once."""
    if not prompt_lengths or not len(workload):
        return 0
    mean = (sum(prompt_lengths) + sum(r.max_tokens for r in workload.requests)) / len(workload)
    return int(kv_tokens // max(mean, 1))


def seqs_plan(space: SearchSpace, conc: Concurrency | None) -> tuple[SearchSpace, list[str], Any]:
    """``space`` without ``max-num-seqs`` values (the ``max_seqs`` parameter) below the peak; the
    prior's lines; the value the informed candidates use (None: vLLM's default is at or above the peak)."""
    found = space.tunable_named(space.roles.max_seqs)
    if found is None or conc is None:
        return space, [], None
    name, p = found
    lines = [f"prior: the workload's concurrency: {conc.how}"]
    new = _kept(p, conc.peak)
    if new == p:
        return space, lines, None
    before = list(p.choices) if p.choices else f"{p.low:g}..{p.high:g}"
    after = list(new.choices) if new.choices else f"{new.low:g}..{new.high:g}"
    lines.append(f"prior: {name} below {conc.peak} would queue requests by construction: {before} -> {after}")
    params = dict(space.parameters)
    params[name] = new
    floor = min(new.choices) if new.choices else int(new.low or 0)
    default = p.default if isinstance(p.default, int | float) else None
    return (
        space.model_copy(update={"parameters": params}),
        lines,
        (floor if default is not None and default < conc.peak else None),
    )


def _kept(p: Parameter, peak: int) -> Parameter:
    if p.choices:
        numeric = [c for c in p.choices if isinstance(c, int | float)]
        kept = tuple(c for c in numeric if c >= peak) or (max(numeric),)
        return p if len(kept) == len(p.choices) else p.model_copy(update={"choices": kept})
    if p.low is not None and p.high is not None and p.low < peak:
        return p.model_copy(update={"low": float(min(peak, p.high))})
    return p
