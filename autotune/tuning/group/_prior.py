"""The prior's first split of a group's budget: the KV goes where the reuse is.

Each model needs, of the budget, the smallest share whose KV holds its workload's working set (the
distinct prompt blocks: what an unlimited prefix cache would keep), and at least one request of its
``max_model_len``. The split is proportional to those needs, every model kept at or above its
minimum; the reason is said per model ("rag: working set 9,472 tokens, 37.0 MiB of KV ...").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.memory import GiB, MachineFacts, read_machine_facts
from autotune.tuning._prior import _tokenize
from autotune.tuning._prior_lru import chains_of
from autotune.tuning.group._setup import GroupBudget, GroupModel, GroupSetup

__all__ = ["PriorSplit", "prior_split"]

_STEPS = 24  # bisection steps over a share: 2^-24 of the budget


@dataclass(frozen=True)
class PriorSplit:
    split: Mapping[str, float] | None  # None: no memory estimate for some model (no config.json)
    lines: tuple[str, ...]


def _kv_tokens(
    m: GroupModel, budget: GroupBudget, fraction: float, facts: MachineFacts
) -> tuple[int, int, int]:
    """(KV tokens, block size, KV bytes per token) of a model under ``fraction`` of the budget."""
    assert m.setup.guard is not None
    est = m.setup.guard.check(m.sizing(budget, fraction, {}), facts).estimate
    return (est.kv_tokens, est.block_size, est.kv_bytes_per_token) if est is not None else (0, 0, 0)


def _needed(m: GroupModel, budget: GroupBudget, tokens: int, facts: MachineFacts) -> float:
    """The smallest fraction of the budget whose KV holds ``tokens`` (1.0 when even all of it cannot)."""
    if _kv_tokens(m, budget, 1.0, facts)[0] < tokens:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if _kv_tokens(m, budget, mid, facts)[0] < tokens else (low, mid)
    return high


def _fmt_bytes(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 2**20:.1f} MiB"


def _split(need: Mapping[str, float], floor: Mapping[str, float]) -> dict[str, float]:
    """Fractions proportional to ``need`` (summing to 1), each raised to its ``floor`` where the budget
    allows, the rest shared in proportion among the others."""
    total = sum(need.values())
    if total <= 0:
        return {n: 1.0 / len(need) for n in need}
    out = {n: v / total for n, v in need.items()}
    low = {n for n in out if out[n] < floor[n]}
    if low and sum(floor[n] for n in low) < 1:
        left = 1 - sum(floor[n] for n in low)
        rest = sum(out[n] for n in out if n not in low) or 1.0
        out = {n: floor[n] if n in low else out[n] * left / rest for n in out}
    return out


def prior_split(group: GroupSetup) -> PriorSplit:
    """The first split to try, from each model's working set and KV bytes per token, with the reason."""
    if any(m.setup.guard is None for m in group.models):
        return PriorSplit(None, ("prior split: off (a model has no config.json here: its KV is unknown)",))
    facts = read_machine_facts(group.models[0].setup.guard.probe if group.models[0].setup.guard else None)
    need: dict[str, float] = {}
    floor: dict[str, float] = {}
    parts: list[str] = []
    for m in group.models:
        _, block, per_token = _kv_tokens(m, group.budget, 1.0, facts)
        if not block and m.setup.guard is not None:
            why = "; ".join(m.setup.guard.check(m.sizing(group.budget, 1.0, {}), facts).reasons)
            return PriorSplit(
                None, (f"prior split: off (no KV estimate for {m.name} on this machine: {why})",)
            )
        prompts, _tok = _tokenize(m.setup.workload, m.setup.model)
        working = chains_of(prompts, block).distinct * block if block else 0
        one = m.max_model_len or 0
        floor[m.name] = _needed(m, group.budget, one, facts) if one else 0.0
        need[m.name] = (
            max(_needed(m, group.budget, working, facts), floor[m.name]) if working else floor[m.name]
        )
        parts.append(
            f"{m.name}: working set {working:,} tokens, {_fmt_bytes(working * per_token)} of KV at "
            f"{per_token:,} B/token (needs {need[m.name]:.2f} of the budget; one request of {one:,} tokens "
            f"{floor[m.name]:.2f})"
        )
    split = _split(need, floor)
    shown = "/".join(f"{split[n]:.2f}" for n in group.names)
    return PriorSplit(split, (f"prior split: {'; '.join(parts)}; split {shown} ({'/'.join(group.names)})",))
