"""The fits recover the costs that made the data, and the model predicts a configuration it has not
seen from another's measurement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.bench import RequestTiming
from autotune.predict import (
    EngineCosts,
    LatencyModel,
    MeasuredTrial,
    Replay,
    RequestTimes,
    TierHits,
    WorkloadShape,
    fit_costs,
    replayed_hits,
    tier_hits,
)
from tests.unit.predict.conftest import TRUE, candidate, measured, shape


def _replayed(s: WorkloadShape, m: MeasuredTrial) -> TierHits:
    """The measured trial's cache hits as the model computes them (its cache over the measured run)."""
    t = m.passes[0]
    return replayed_hits(LatencyModel(s).cache(m.candidate), t.sent, t.sent + t.latency)


def test_fit_recovers_the_costs_that_made_the_replay() -> None:
    s = shape()
    m = measured(s, candidate())

    costs = fit_costs([Replay(m.passes[0], _replayed(s, m), 2048)])

    assert costs.prefill_s_per_token == pytest.approx(TRUE.prefill_s_per_token, rel=0.1)
    assert costs.step_s == pytest.approx(TRUE.step_s, rel=0.1)
    assert costs.step_s_per_seq == pytest.approx(TRUE.step_s_per_seq, rel=0.3)
    # the TTFT intercept is the overhead outside the steps plus the first step's fixed part
    assert costs.overhead_s == pytest.approx(TRUE.overhead_s, abs=0.001)
    assert costs.host_s_per_token is None  # no pool: no host load measured
    assert costs.requests == len(s.ids)


def test_fit_recovers_the_host_pool_load_cost() -> None:
    s = shape(gap_s=0.15)
    truth = EngineCosts(**{**TRUE.as_dict(), "host_s_per_token": 4e-6})  # type: ignore[arg-type]
    c = candidate(kv=1_500, pool_tokens=50_000)  # a small GPU tier beside a pool
    m = measured(s, c, costs=truth)
    hits = _replayed(s, m)
    assert hits.host.sum() > 0 and hits.gpu.sum() > 0  # both tiers serve

    costs = fit_costs([Replay(m.passes[0], hits, 2048)])

    assert costs.host_s_per_token == pytest.approx(4e-6, rel=0.1)
    assert costs.prefill_s_per_token == pytest.approx(TRUE.prefill_s_per_token, rel=0.1)


def test_costs_are_never_negative_on_noisy_data() -> None:
    s = shape(n=60)
    costs = fit_costs(
        [Replay(measured(s, candidate(), noise=0.3).passes[0], tier_hits(s.prompts, 32, 100_000), 2048)]
    )

    assert all(v is None or v >= 0 for v in costs.as_dict().values())


def test_a_model_fitted_on_one_configuration_predicts_another_within_10_percent() -> None:
    s = shape(gap_s=0.05)
    model = LatencyModel(s)
    model.fit([measured(s, candidate(kv=100_000, block=32), noise=0.05)])
    small = candidate(caching=False)  # prefix caching off: every prompt token computed

    predicted = model.predict(small)
    truth = measured(s, small).ttft_p90_ms()

    assert predicted.hit_gpu == 0.0
    assert predicted.ttft_p90_ms == pytest.approx(truth, rel=0.1)
    assert model.predict(candidate()).hit_gpu > 0.5
    ranked = model.rank([small, candidate()])
    assert ranked[0].candidate == candidate()  # hits make it faster


def test_queueing_is_predicted_when_the_step_budget_is_small() -> None:
    """Chunked prefill with a small token budget queues a burst: the simulation sees it."""
    s = shape(gap_s=0.03)
    model = LatencyModel(s)
    model.fit([measured(s, candidate())])
    chunked = candidate(batched=64, seqs=4)

    assert model.predict(chunked).ttft_p90_ms > 2 * model.predict(candidate()).ttft_p90_ms
    assert model.predict(chunked).ttft_p90_ms == pytest.approx(measured(s, chunked).ttft_p90_ms(), rel=0.15)


def test_request_times_follow_workload_order_by_request_id() -> None:
    def timing(rid: str, sent: float, ok: bool = True) -> RequestTiming:
        return RequestTiming(rid, None, sent, sent, 0.1 if ok else None, 0.5 if ok else None, (), 5, 10,
                             error=None if ok else "HTTP 500: x")  # fmt: skip

    times = RequestTimes.from_timings([timing("b", 1.0), timing("a", 0.0, ok=False)], ["a", "b", "c"])

    assert times.sent[1] == 1.0 and times.ok.tolist() == [False, True, False]
    assert np.isnan(times.ttft[0]) and np.isnan(times.sent[2])


def test_cache_replay_matches_the_prior_on_one_tier() -> None:
    # the prior's own replay (no package face exports it): the two must agree where they overlap
    from autotune.tuning._prior_lru import chains_of, lru_hit_share

    s = shape(n=80)
    for capacity in (500, 2_000, 100_000):
        gpu, _ = tier_hits(s.prompts, 32, capacity).share()
        assert gpu == pytest.approx(lru_hit_share(chains_of(s.prompts, 32), capacity))


def test_request_times_from_a_trials_npz_are_its_passes_in_workload_order(tmp_path: Path) -> None:
    from autotune.trial import read_request_timings, write_request_timings

    def timing(rid: str, scheduled: float, sent: float) -> RequestTiming:
        return RequestTiming(rid, None, scheduled, sent, 0.1, 0.5, (), 5, 10)

    # two passes one after the other, each in completion order ("b" finished first), the second pruned
    pass_ = [timing("b", 1.0, 1.0), timing("a", 0.0, 1.2)]
    path = write_request_timings([*pass_, *pass_, pass_[0]], tmp_path / "t.npz")

    passes = RequestTimes.passes_from_arrays(read_request_timings(path), requests=2)

    assert [p.sent.tolist() for p in passes] == [[1.2, 1.0], [1.2, 1.0], [1.0]]  # workload order: "a" first
    assert passes[0].ttft_ms(90) == pytest.approx(100.0) and passes[0].tpot_ms(50) == pytest.approx(100.0)


def test_under_load_a_small_cache_serves_fewer_hits_than_one_request_at_a_time() -> None:
    """Running requests pin their blocks: the prior's one-at-a-time replay overstates a small cache."""
    s = shape(gap_s=0.02, docs=4, doc_tokens=(550, 650))  # the demo's: 4 documents, about the KV cache
    small = candidate(kv=2_560, block=128)
    model = LatencyModel(s)
    model.fit([measured(s, candidate())])

    alone, _ = tier_hits(s.prompts, 128, 2_560).share()
    loaded = model.predict(small).hit_gpu

    assert loaded < alone - 0.1
    unlimited, _ = tier_hits(s.prompts, 128, 100_000).share()
    assert model.predict(candidate(kv=100_000, block=128)).hit_gpu == pytest.approx(unlimited, abs=0.01)


def test_a_cache_that_cannot_hold_the_next_request_queues_it() -> None:
    from autotune.predict import KvCache, chains_of

    prompts = [tuple(range(i * 1000, i * 1000 + 300)) for i in range(3)]
    cache = KvCache(chains_of(prompts, 100), np.array([50.0, 50.0, 50.0]), gpu_blocks=8)

    assert cache.admit(0) == (0, 0) and cache.admit(1) == (0, 0)  # 4 blocks each
    assert cache.admit(2) is None  # 8 of 8 held
    cache.release(0)
    assert cache.admit(2) == (0, 0)  # request 0's cached blocks evicted for it


def test_capacity_at_a_ttft_limit_is_the_densest_load_that_holds_it() -> None:
    s = shape(gap_s=0.1)
    model = LatencyModel(s)
    model.fit([measured(s, candidate())])
    limit = 2 * model.predict(candidate()).ttft_p90_ms

    cached = model.capacity_at(candidate(), limit)
    uncached = model.capacity_at(candidate(caching=False), limit)

    assert cached is not None and uncached is not None and cached > uncached > 0.125  # hits buy load
    assert model.predict_at(candidate(), cached).ttft_p90_ms <= limit
    assert model.predict_at(candidate(), cached * 1.2).ttft_p90_ms > limit  # within the bisection's step
    assert model.capacity_at(candidate(), 0.001) is None  # below any request's own prefill
