"""The workload-aware prior: before launching anything, what the KV cache can do for this workload.

The tool knows the workload's prompts (as the model's tokenizer cuts them), the KV bytes per token
and each configuration's KV capacity (the memory estimate). Replaying the prompts' block chains
through an LRU cache of that capacity predicts the prefix-cache hit share of a configuration, as
vLLM's prefix cache would see it if requests ran one at a time (running requests pin their blocks,
so under load the real share is lower; the prediction ranks configurations, it is not a figure).
vLLM frees a request's blocks tail first, so a prompt's shared head stays longest: the chains are
touched in reverse. A CPU offload pool keeps a copy of every computed block (write-through), so
with a pool the cache holds about ``max(GPU KV, pool)`` tokens.

From that: the informed candidates enqueued right after the baseline (the memory setting with the
best predicted hits, then, when a pool can add hits, the smallest pool that holds them), pool sizes
above the one that holds the whole working set dropped, and offload measured at most once when the
numbers say it cannot help (later proposals with a pool are not launched; they are recorded as
such). Every prediction is stored on its trial next to the measured hit rates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna

from autotune.engine import EngineSizing
from autotune.space import EngineConfig, SearchSpace, describe_values
from autotune.study import in_scope
from autotune.trial import MemoryGuard
from autotune.tuning._prior_lru import Chains, chains_of, lru_hit_share
from autotune.tuning._prior_pool import GAIN, GiB, offload_plan
from autotune.tuning._prior_seqs import kv_concurrency, peak_concurrency, seqs_plan
from autotune.tuning._prior_veto import FAR_WORSE, checked_by, no_gain_reason
from autotune.workload import PromptTokenizer, WordTokenizer, Workload, load_tokenizer

__all__ = ["Prior", "PriorInputs", "build_prior", "lru_hit_share"]

log = logging.getLogger(__name__)


class PriorInputs(Protocol):
    """What the prior reads of a tuning set-up (:class:`~autotune.tuning.TuningSetup` has it all)."""

    @property
    def space(self) -> SearchSpace: ...

    @property
    def workload(self) -> Workload: ...

    @property
    def guard(self) -> MemoryGuard | None: ...

    @property
    def model(self) -> str: ...

    def sizing(self, config: EngineConfig | None = None) -> EngineSizing: ...

    def fit_reasons(self, config: EngineConfig | None = None) -> tuple[str, ...]: ...


@dataclass
class Prior:
    """The reasoning (``lines``), the informed ``candidates``, the shrunk ``space`` and the hooks the
    study runs with (``predict`` stored on every trial, ``veto`` asked before every launch)."""

    lines: list[str]
    space: SearchSpace
    candidates: list[dict[str, Any]] = field(default_factory=list)
    _setup: PriorInputs | None = None
    _chains: dict[int, Chains] = field(default_factory=dict)
    _hits: dict[tuple[int, int], float] = field(default_factory=dict)
    _prompts: list[list[int]] = field(default_factory=list)
    offload_helps: bool | None = None

    # -- predictions -------------------------------------------------------------------------
    def chains(self, block_size: int) -> Chains:
        if block_size not in self._chains:
            self._chains[block_size] = chains_of(self._prompts, block_size)
        return self._chains[block_size]

    def hit_share(self, block_size: int, capacity_tokens: int) -> float:
        key = (block_size, capacity_tokens)
        if key not in self._hits:
            self._hits[key] = lru_hit_share(self.chains(block_size), capacity_tokens)
        return self._hits[key]

    def pool_tokens(self, gib: float, values: Mapping[str, Any]) -> int:
        """Tokens a host pool of ``gib`` holds at this configuration's KV dtype (fp8 halves a token)."""
        setup = self._setup
        assert setup is not None and setup.guard is not None
        per_token = setup.guard.kv_bytes_per_token(setup.sizing(EngineConfig.chosen(self.space, values)))
        return int(gib * GiB / per_token) if per_token else 0

    def _with_fixed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """A configuration with the values the user fixed (a fixed pool, prefix caching fixed off)."""
        return {**self.space.fixed_values, **values}

    def capacity(self, values: Mapping[str, Any]) -> tuple[int, int, int] | None:
        """(GPU KV tokens, block size, pool tokens) of a configuration, from the memory estimate (the
        fixed flags, a fixed KV size or memory share included: they are in the engine's argv)."""
        setup = self._setup
        if setup is None or setup.guard is None:
            return None
        values = self._with_fixed(values)
        sizing = setup.sizing(EngineConfig.chosen(self.space, values))
        estimate = setup.guard.check(sizing).estimate
        if estimate is None or estimate.kv_tokens <= 0:
            return None
        pool_gib = float(self.space.value_of(self.space.roles.kv_pool, values) or 0)
        per_token = setup.guard.kv_bytes_per_token(sizing)
        pool = int(pool_gib * GiB / per_token) if per_token else 0
        return estimate.kv_tokens, estimate.block_size, pool

    def predict(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """What the prior expects of a configuration (stored on its trial next to the measurement)."""
        cap = self.capacity(values)
        if cap is None or not self._prompts:
            return {}
        values = self._with_fixed(values)
        gpu, block, pool = cap
        caching = self.space.value_of(self.space.roles.prefix_caching, values, True) is not False
        if_caching = self.hit_share(block, gpu)
        # stored on the trial as is (block_size: the KV block the estimate used, not a parameter)
        out: dict[str, Any] = dict(
            gpu_kv_tokens=gpu,
            block_size=block,
            working_set_tokens=self.chains(block).distinct * block,
            prefix_hit_gpu=round(if_caching if caching else 0.0, 4),
            prefix_hit_bound=round(self.chains(block).prompt_tokens and self.bound(block), 4),
        )
        if not caching:  # what the same memory would serve with prefix caching on
            out["prefix_hit_if_caching"] = round(if_caching, 4)
        if pool:
            out["pool_tokens"] = pool
            # a write-through pool: with caching on the cache holds about max(GPU, pool) tokens; with it
            # off the GPU keeps no prefixes, but the connector still serves repeated prompt tokens from
            # its host pool (the native OffloadingConnector, measured on the H200)
            out["prefix_hit_with_pool"] = round(self.hit_share(block, max(gpu, pool) if caching else pool), 4)
        return out

    def bound(self, block_size: int) -> float:
        return self.hit_share(block_size, self.chains(block_size).distinct * block_size)

    # -- the study's hooks -------------------------------------------------------------------
    def veto(self, study: optuna.Study, values: Mapping[str, Any]) -> str | None:
        """A region the prior predicts no better (offload that cannot add hits) or far worse (prefix
        caching off without a pool at high predicted reuse) is measured once, as a check; later
        proposals in it are not launched. The reason says what the prior computed. A region the user
        fixed (a pool, caching off) is every proposal's: ``values`` are the tuned ones only."""
        pool = float(self.space.value_of(self.space.roles.kv_pool, values) or 0)
        caching = self.space.value_of(self.space.roles.prefix_caching, values, True) is not False
        if not pool and caching:
            return None
        p = self.predict(values)
        if not p:
            return None
        if pool:
            if p.get("prefix_hit_with_pool", 0.0) - p["prefix_hit_gpu"] >= GAIN:
                return None
            region, why = "offload", no_gain_reason(p, caching)
        else:
            if p["prefix_hit_if_caching"] < FAR_WORSE:
                return None
            region = "prefix caching off without a host pool"
            why = (
                f"prefix caching off without a host pool serves no prefix hits, where caching on predicts "
                f"{p['prefix_hit_if_caching']:.1%} of prompt tokens here (GPU KV {p['gpu_kv_tokens']:,} tokens, "
                f"working set {p['working_set_tokens']:,} tokens)"
            )
        checked = checked_by(study, self.space, pool_trial=bool(pool))
        return None if checked is None else f"{why}, and trial {checked} already checked {region}"

    def enqueue(self, study: optuna.Study, scope: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Enqueue the candidates no trial has measured or queued yet (after the baseline). With
        ``scope`` (user attrs, e.g. tonight's night after a new day's traffic), only the trials that
        carry it count as measured: a figure on another workload does not stand for this one."""
        known = [t.params for t in study.get_trials(deepcopy=False) if in_scope(t, scope)]
        known += [
            t.system_attrs.get("fixed_params", {})
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        ]
        added = []
        for c in self.candidates:
            if any(all(k.get(n) == v for n, v in c.items()) for k in known if k):
                continue
            study.enqueue_trial(c, user_attrs={"informed": True})
            added.append(c)
        return added


def _defaults(space: SearchSpace) -> dict[str, Any]:
    """Each tunable parameter at vLLM's default, where the space names one."""
    return {n: p.default for n, p in space.tunable.items() if p.default is not None and p.condition is None}


def _tokenize(workload: Workload, model: str) -> tuple[list[list[int]], str]:
    tok: PromptTokenizer
    try:
        tok = load_tokenizer(model)
    except Exception:  # a hub name, or no tokenizer files: words are close enough to rank
        tok = WordTokenizer()
    return [tok.prompt_ids(r) for r in workload.requests], tok.name


Row = tuple[float, dict[str, Any], tuple[int, int, int]]


def _rows(prior: Prior, setup: PriorInputs, base: dict[str, Any], kv_knobs: list[str]) -> list[Row]:
    """(predicted hits, values, capacity) of every memory setting: KV size x block size x KV dtype."""
    space = prior.space
    tunable = space.tunable
    swept = (*kv_knobs[:1], space.roles.block_size, space.roles.kv_dtype)
    grid: list[tuple[str, list[Any]]] = [(n, tunable[n].grid()) for n in swept if n in tunable]
    configs: list[dict[str, Any]] = [dict(base)]
    for name, options in grid:
        configs = [{**c, name: v} for c in configs for v in options]
    pool, caching = space.roles.kv_pool, space.tunable_named(space.roles.prefix_caching)
    rows: list[Row] = []
    for values in configs:
        values.pop(pool or "", None)
        if caching is not None:
            values[caching[0]] = True
        if setup.fit_reasons(EngineConfig.chosen(prior.space, values)):
            continue
        cap = prior.capacity(values)
        if cap is not None:
            rows.append((prior.hit_share(cap[1], cap[0]), values, cap))
    return rows


def build_prior(setup: PriorInputs) -> Prior:
    """The prior for this setup (needs the memory estimate: without --check-memory it says so)."""
    prior = Prior(lines=[], space=setup.space, _setup=setup)
    if setup.guard is None:
        prior.lines.append("prior: off (memory checks are off, so KV capacities are unknown)")
        return prior
    prior._prompts, tok_name = _tokenize(setup.workload, setup.model)
    tunable = setup.space.tunable
    base = _defaults(setup.space)
    conc = peak_concurrency(setup.workload, getattr(setup, "arrival", None))
    prior.space, seq_lines, seqs = seqs_plan(prior.space, conc)
    roles = setup.space.roles
    if seqs is not None and roles.max_seqs is not None:
        base[roles.max_seqs] = seqs
    kv_knobs = [n for n in (roles.gpu_share, roles.kv_bytes) if n in tunable]  # the first one is swept
    rows = _rows(prior, setup, base, kv_knobs)
    if not rows:
        prior.lines.append(
            "prior: no configuration of the space has a KV estimate here: no informed candidates"
        )
        return prior
    ch = _working_set(prior, setup, setup.guard, rows[0][2][1], tok_name)
    hit, best, (gpu, block, _) = _best_row(setup.space, rows)
    _best_memory(prior, setup, best, (hit, gpu, block), kv_knobs)
    prior.lines += _dtype_lines(prior, rows, best, _tuned_default(setup.space, roles.kv_dtype)) + seq_lines
    prior.lines += _held_lines(prior, setup, gpu)
    if (pool := setup.space.tunable_named(roles.kv_pool)) is not None:
        prior.space = offload_plan(prior, pool, best, gpu, block, hit, ch.distinct * block)
    prior.lines.append(
        "prior: informed candidates after the baseline: "
        + (
            "; ".join(_fmt(setup.space, c, list(c)) for c in prior.candidates)
            or "none (the baseline is the best predicted)"
        )
    )
    return prior


def _working_set(prior: Prior, setup: PriorInputs, guard: MemoryGuard, block: int, tok_name: str) -> Chains:
    """The workload's block chains at ``block`` tokens a block, said in one line: what an unlimited
    prefix cache serves, and the working set in tokens and bytes of KV."""
    ch = prior.chains(block)
    per_token = guard.kv_bytes_per_token(setup.sizing())
    prior.lines.append(
        f"prior: {len(setup.workload)} requests, {ch.prompt_tokens:,} prompt tokens ({tok_name}); an unlimited "
        f"prefix cache serves {prior.bound(block):.1%} of them at block {block}; working set "
        f"{ch.distinct * block:,} tokens = {ch.distinct * block * per_token / GiB:.2f} GiB of KV"
    )
    return ch


def _best_row(space: SearchSpace, rows: list[Row]) -> Row:
    """The memory setting with the most predicted hits; ties (within GAIN): the model's KV dtype
    first (fp8 changes numerics: only when it buys hits), then vLLM's default block size, then the
    largest KV."""
    default_block = _tuned_default(space, space.roles.block_size)
    default_dtype = _tuned_default(space, space.roles.kv_dtype)
    dtype = space.roles.kv_dtype or ""
    best_hit = max(r[0] for r in rows)
    close = [r for r in rows if r[0] >= best_hit - GAIN]
    close.sort(
        key=lambda r: (
            r[1].get(dtype, default_dtype) == default_dtype,
            r[2][1] == default_block,
            r[2][0],
        ),
        reverse=True,
    )
    return close[0]


def _best_memory(
    prior: Prior,
    setup: PriorInputs,
    best: dict[str, Any],
    predicted: tuple[float, int, int],
    kv_knobs: list[str],
) -> None:
    """The best memory setting a candidate (unless it is the baseline's), said in one line with its
    ``predicted`` (hits, KV tokens, block)."""
    hit, gpu, block = predicted
    tunable = setup.space.tunable
    # every value at vLLM's default (as the space names it): the baseline measures it already
    is_baseline = all(tunable[n].default is not None and v == tunable[n].default for n, v in best.items())
    if not is_baseline:
        prior.candidates.append(dict(best))
    bound = prior.bound(block)
    prior.lines.append(
        f"prior: best memory setting {_fmt(setup.space, best, _memory_names(setup.space, kv_knobs))}"
        + (" (vLLM's defaults: the baseline measures it)" if is_baseline and best else "")
        + f": KV cache {gpu:,} tokens, predicted prefix hits {hit:.1%} of prompt tokens (unlimited cache: {bound:.1%})"
    )


def _held_lines(prior: Prior, setup: PriorInputs, gpu: int) -> list[str]:
    """How many requests of the workload's mean length a KV cache of ``gpu`` tokens holds at once,
    when the space tunes the running-sequence cap."""
    seqs_name = setup.space.roles.max_seqs
    if seqs_name not in setup.space.tunable:
        return []
    held = kv_concurrency(gpu, [len(x) for x in prior._prompts], setup.workload)
    if not held:
        return []
    return [
        f"prior: that KV cache holds about {held:,} requests of the workload's mean length at once "
        f"({seqs_name} above it adds concurrency only by preempting)"
    ]


def _tuned_default(space: SearchSpace, name: str | None) -> Any:
    """vLLM's default of parameter ``name`` when it is tuned (None: not tuned, or no default named)."""
    found = space.tunable_named(name)
    return found[1].default if found is not None else None


def _memory_names(space: SearchSpace, kv_knobs: Sequence[str]) -> list[str]:
    """The names of a memory setting: the KV knobs, the block size and the KV dtype."""
    return [*kv_knobs, *(n for n in (space.roles.block_size, space.roles.kv_dtype) if n is not None)]


def _dtype_lines(prior: Prior, rows: list[Row], best: dict[str, Any], default: Any) -> list[str]:
    """What the KV dtype does at the best memory setting: tokens held and predicted hits per dtype."""
    found = prior.space.tunable_named(prior.space.roles.kv_dtype)
    if found is None:
        return []
    dtype, param = found
    same = [r for r in rows if all(r[1].get(k) == v for k, v in best.items() if k != dtype)]
    parts = [f"{r[1].get(dtype)}: {r[2][0]:,} tokens, predicted hits {r[0]:.1%}" for r in same]
    chosen = best.get(dtype, default)
    note = param.opt_in or ""
    return [
        f"prior: {dtype} at that setting: "
        + "; ".join(parts)
        + (
            f"; {chosen} chosen: {note}"
            if chosen != default
            else f"; {default} kept (fp8 adds under {GAIN:.0%})"
        )
    ]


def _fmt(space: SearchSpace, values: Mapping[str, Any], names: Sequence[str]) -> str:
    """Each value as its flag takes it, with its unit (``kv_cache_memory_bytes=128M``, not ``=128``)."""
    return describe_values(space, {n: values[n] for n in names if n in values}) or "(defaults)"
