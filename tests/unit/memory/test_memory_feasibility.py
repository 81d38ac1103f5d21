"""Feasibility before launch: one readable reason per problem, with the numbers."""

from __future__ import annotations

import pytest

from autotune.memory import (
    FeasibilityInput,
    GiB,
    check_feasibility,
    clamp_offload_range,
    read_machine_facts,
)

MiB = 1 << 20


@pytest.fixture
def llama_request(shape_of):
    def build(**overrides) -> FeasibilityInput:
        fields = dict(
            shape=shape_of("llama-3-8b"),
            weight_bytes=16 * 10**9,
            platform="cuda",
            gpu_memory_utilization=0.9,
            max_model_len=8192,
            block_size=16,
        )
        fields.update(overrides)
        return FeasibilityInput(**fields)

    return build


def test_llama3_8b_fits_a_free_h100(llama_request, fake_probe, gpu):
    verdict = check_feasibility(llama_request(), read_machine_facts(fake_probe(gpu_list=[gpu()])))
    assert verdict.feasible and verdict.reasons == ()
    assert verdict.estimate is not None and verdict.estimate.max_concurrency > 10


def test_memory_held_by_other_processes_is_named(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu(free=49 * GiB)]))
    verdict = check_feasibility(llama_request(), facts)
    assert not verdict.feasible
    (reason,) = verdict.reasons
    assert "gpu_memory_utilization 0.9" in reason
    assert "exceeds the 48.50 GiB usable on GPU 0" in reason
    assert "other processes hold 30.20 GiB" in reason


def test_request_longer_than_the_kv_cache(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu()]))
    verdict = check_feasibility(llama_request(max_model_len=1_000_000, gpu_memory_utilization=0.5), facts)
    assert not verdict.feasible
    assert "cannot hold one request of max_model_len 1,000,000" in verdict.reasons[0]


def test_weights_leaving_no_kv(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu()]))
    verdict = check_feasibility(llama_request(gpu_memory_utilization=0.2), facts)
    assert "leave nothing of the" in verdict.reasons[0]


def test_cuda_engine_without_gpu(llama_request, fake_probe):
    verdict = check_feasibility(llama_request(), read_machine_facts(fake_probe()))
    assert verdict.reasons == ("a CUDA engine needs a GPU: no NVIDIA GPU visible (NVML: fake)",)
    assert verdict.estimate is None


def test_offload_pool_over_the_host_share(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu()], host=(128 * GiB, 100 * GiB)))
    assert check_feasibility(llama_request(offload_bytes=60 * GiB), facts).feasible
    verdict = check_feasibility(llama_request(offload_bytes=70 * GiB), facts)
    assert verdict.reasons == (
        "the CPU KV offload pool (70.00 GiB) exceeds 65% of the 100.00 GiB host memory available "
        "(65.00 GiB); it is pinned and cannot swap",
    )
    assert check_feasibility(llama_request(offload_bytes=70 * GiB), facts, host_share=0.8).feasible


def test_shm_pool_larger_than_dev_shm_free(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu()]))
    assert check_feasibility(llama_request(shm_pool_bytes=20 * GiB), facts).feasible
    verdict = check_feasibility(llama_request(shm_pool_bytes=31 * GiB), facts)
    assert "exceeds the 30.00 GiB free in /dev/shm" in verdict.reasons[0]
    no_shm = read_machine_facts(fake_probe(gpu_list=[gpu()], shm_space=None))
    assert "not mounted" in check_feasibility(llama_request(shm_pool_bytes=GiB), no_shm).reasons[0]


def test_every_problem_is_reported_at_once(llama_request, fake_probe, gpu):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu(free=10 * GiB)], host=(64 * GiB, 10 * GiB)))
    verdict = check_feasibility(llama_request(offload_bytes=20 * GiB, shm_pool_bytes=40 * GiB), facts)
    assert len(verdict.reasons) == 3


def test_cpu_platform_uses_the_given_kv_bytes_and_the_memory_node(shape_of, fake_probe):
    facts = read_machine_facts(fake_probe(host=(24 * GiB, 23 * GiB), node=(8 * GiB, 6 * GiB)))
    tiny = dict(
        shape=shape_of("tiny-llama-2layer"), weight_bytes=3_650_240, platform="cpu", max_model_len=1024
    )
    ok = check_feasibility(
        FeasibilityInput(gpu_memory_utilization=0.9, block_size=128, kv_cache_memory_bytes=64 * MiB, **tiny),
        facts,
    )
    assert ok.feasible and ok.estimate is not None and ok.estimate.kv_tokens == 32_768
    too_big = check_feasibility(
        FeasibilityInput(gpu_memory_utilization=0.9, block_size=128, kv_cache_memory_bytes=7 * GiB, **tiny),
        facts,
    )
    assert "more than the 6.00 GiB available" in too_big.reasons[0]
    # Without explicit KV bytes the CPU build reserves utilization x the node's total.
    util = check_feasibility(FeasibilityInput(gpu_memory_utilization=0.9, block_size=128, **tiny), facts)
    assert "reserves 7.20 GiB of the 8.00 GiB host memory" in util.reasons[0]
    assert check_feasibility(
        FeasibilityInput(gpu_memory_utilization=0.5, block_size=128, **tiny), facts
    ).feasible


def test_clamp_offload_range(fake_probe):
    facts = read_machine_facts(fake_probe(host=(128 * GiB, 100 * GiB)))
    assert clamp_offload_range(200.0, facts) == 65.0
    assert clamp_offload_range(32.0, facts) == 32.0
    assert clamp_offload_range(200.0, facts, host_share=0.333) == 33.3


def test_cpu_build_cannot_offload(shape_of, fake_probe):
    facts = read_machine_facts(fake_probe(node=(8 * GiB, 6 * GiB)))
    request = FeasibilityInput(
        shape=shape_of("tiny-llama-2layer"),
        weight_bytes=3_650_240,
        platform="cpu",
        gpu_memory_utilization=0.5,
        max_model_len=1024,
        block_size=128,
        offload_bytes=GiB,
    )
    (reason,) = check_feasibility(request, facts).reasons
    assert "CPU build cannot offload" in reason
