"""Assigning GPUs to workers: groups of one or of a tensor-parallel size, each engine seeing only its
own GPUs, each worker's memory guard reading only its own."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.engine import GpuLease, sizing_from_argv
from autotune.engine._lease import LEASE_ENV
from autotune.errors import ConfigError, StudyBusyError
from autotune.memory import GiB, MemorySampler
from autotune.space import RenderedConfig
from autotune.studyfile import StudySpec
from autotune.tuning import (
    GpuGroup,
    TuningSetup,
    build_setup,
    for_gpus,
    on_gpus,
    plan_baseline,
    plan_groups,
)
from autotune.tuning._gpus import engine_gpus, gpu_mix, parse_gpus
from tests.unit.conftest import FakeProbe, h100

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
TP_SPACE = """
name: tp
platform: cuda
parameters:
  tensor_parallel_size: {type: categorical, choices: [1, 2, 4], flag: --tensor-parallel-size}
  block_size: {type: categorical, choices: [16, 32], flag: --block-size}
"""


def _setup(
    tmp_path: Path, *engine_args: str, space: str | None = None, cpu: bool = False
) -> Iterator[TuningSetup]:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / "llama-3-8b.json").read_text())
    wl = tmp_path / "wl.jsonl"
    wl.write_text('{"prompt": "hello there", "max_tokens": 4}\n')
    space_path = None
    if space is not None:
        space_path = tmp_path / "space.yaml"
        space_path.write_text(space)
    choices = StudySpec(
        workload=wl,
        model=str(model),
        profile=None if cpu else "cuda-native",
        dry_run=not cpu,
        space=space_path,
        engine_args=engine_args,
        check_args=False,
    )
    with build_setup(choices) as setup:
        yield setup


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[TuningSetup]:
    yield from _setup(tmp_path)


def four_gpus(used: tuple[float, ...] = (0, 0, 0, 0)) -> FakeProbe:
    return FakeProbe(gpu_list=[h100(free=int((79 - u) * GiB), index=i) for i, u in enumerate(used)])


def test_gpus_option() -> None:
    assert parse_gpus("0,1, 3") == (0, 1, 3) and parse_gpus("all") is None
    for bad in ("0,0", "a,b", "", "-1"):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpus(bad)


def test_one_worker_per_gpu(setup: TuningSetup) -> None:
    groups = plan_groups(setup, "all", probe=four_gpus(), env={})
    assert [g.gpus for g in groups] == [(0,), (1,), (2,), (3,)]
    assert [g.slot for g in groups] == [0, 1, 2, 3]
    assert groups[2].names == ("NVIDIA H100 80GB HBM3",)
    assert groups[2].trial_attrs() == {"worker": 2, "gpus": [2], "gpu_name": "NVIDIA H100 80GB HBM3"}
    assert [g.gpus for g in plan_groups(setup, "3,1", probe=four_gpus(), env={})] == [(3,), (1,)]
    # a process confined by CUDA_VISIBLE_DEVICES keeps to it with --gpus all
    assert [
        g.gpus for g in plan_groups(setup, "all", probe=four_gpus(), env={"CUDA_VISIBLE_DEVICES": "2,3"})
    ] == [
        (2,),
        (3,),
    ]
    with pytest.raises(ConfigError, match=r"no GPU 7 here \(fix: this machine has 0, 1, 2, 3\)"):
        plan_groups(setup, "1,7", probe=four_gpus(), env={})
    with pytest.raises(ConfigError, match="drop --gpus on a machine without GPUs"):
        plan_groups(setup, "all", probe=FakeProbe(), env={})


def test_a_tensor_parallel_group_of_two_takes_two_gpus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for setup in _setup(tmp_path, "--tensor-parallel-size=2"):
        assert engine_gpus(setup) == 2
        groups = plan_groups(setup, "all", probe=four_gpus(), env={})
        assert [g.gpus for g in groups] == [(0, 1), (2, 3)]
        with caplog.at_level(logging.WARNING):
            assert [g.gpus for g in plan_groups(setup, "0,1,2", probe=four_gpus(), env={})] == [(0, 1)]
        assert "leave GPU 2 unused" in caplog.text
        with pytest.raises(ConfigError, match="one engine needs 2 GPUs"):
            plan_groups(setup, "3", probe=four_gpus(), env={})


def test_a_tuned_tensor_parallel_size_takes_groups_of_its_largest_value(tmp_path: Path) -> None:
    for setup in _setup(tmp_path, space=TP_SPACE):
        assert engine_gpus(setup) == 4  # the space may pick 4: a trial needs a whole group
        assert [g.gpus for g in plan_groups(setup, "all", probe=four_gpus(), env={})] == [(0, 1, 2, 3)]
    for setup in _setup(tmp_path, "--tensor-parallel-size=2", space=TP_SPACE):
        assert engine_gpus(setup) == 2  # fixed by the user: not tuned, so groups of two


def test_without_gpus_cpu_workers_split_the_cores(tmp_path: Path) -> None:
    for setup in _setup(tmp_path, cpu=True):
        assert setup.platform == "cpu"
        groups = plan_groups(setup, None, workers=2)
        assert len(groups) == 2 and not groups[0].gpus
        assert set(groups[0].cpus).isdisjoint(groups[1].cpus) and groups[0].cpus
        one = for_gpus(setup, groups[1])
        assert (
            one.launch.env["VLLM_CPU_OMP_THREADS_BIND"]
            == GpuGroup(1, cpus=groups[1].cpus).describe().split()[-1]
        )
        assert "CUDA_VISIBLE_DEVICES" not in one.launch.env


def test_each_engine_sees_only_its_gpus_and_carries_its_lease(setup: TuningSetup, tmp_path: Path) -> None:
    group = plan_groups(setup, "all", probe=four_gpus(), env={})[2]
    with GpuLease(group.gpus, directory=tmp_path / "leases") as lease:
        worker = for_gpus(setup, group, lease, probe=four_gpus())
        env = worker.launch.process_env(RenderedConfig(args=()))
        assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env[LEASE_ENV] == lease.token
        assert "CUDA_VISIBLE_DEVICES" not in setup.launch.env  # the user's setup is left as it was
        assert worker.guard is not None and worker.guard.gpus == (2,)


def test_feasibility_reads_the_workers_gpu_not_the_first(setup: TuningSetup) -> None:
    """GPU 0 is full (another worker's engine); the worker on GPU 1 still fits, the one on GPU 0 not."""
    probe = four_gpus(used=(70, 0, 0, 0))
    groups = plan_groups(setup, "all", probe=probe, env={})
    argv = ["--gpu-memory-utilization", "0.9", "--max-model-len", "4096"]
    on0 = for_gpus(setup, groups[0], probe=probe)
    on1 = for_gpus(setup, groups[1], probe=probe)
    assert on0.guard is not None and on1.guard is not None
    assert on1.guard.check(sizing_from_argv(argv, on1.guard.platform)).feasible
    verdict = on0.guard.check(sizing_from_argv(argv, on0.guard.platform))
    assert not verdict.feasible and "usable on GPU 0" in verdict.reasons[0]
    assert on1.guard.gpu_used() == probe.gpu_list[1].used  # not the sum over the host
    sampler = MemorySampler(1, on1.guard.probe)
    sampler.start()
    assert len(sampler.stop().gpu_used_peak) == 1


def test_a_tensor_parallel_command_is_checked_per_rank(tmp_path: Path) -> None:
    """An 8B model's 15 GiB of weights at utilization 0.2 of an 80 GB GPU (16 GiB) leave no KV
    cache on one GPU; split over two ranks each holds half and has room."""
    for setup in _setup(tmp_path, "--tensor-parallel-size=2"):
        probe = four_gpus()
        argv = ["--gpu-memory-utilization", "0.2", "--max-model-len", "4096", "--enforce-eager"]
        single = for_gpus(setup, GpuGroup(0, gpus=(0,), names=("H100",)), probe=probe)
        pair = for_gpus(setup, GpuGroup(0, gpus=(0, 1), names=("H100", "H100")), probe=probe)
        assert single.guard is not None and pair.guard is not None
        assert not single.guard.check(
            sizing_from_argv(["--tensor-parallel-size", "1", *argv], single.guard.platform)
        ).feasible
        assert pair.guard.check(
            sizing_from_argv(["--tensor-parallel-size", "2", *argv], pair.guard.platform)
        ).feasible
        lacking = single.guard.check(
            sizing_from_argv(["--tensor-parallel-size", "2", *argv], single.guard.platform)
        )
        assert not lacking.feasible and "needs 2 GPUs" in lacking.reasons[0]


def test_a_gpu_missing_from_nvml_is_said() -> None:
    from autotune.memory import GpuSubsetProbe, read_machine_facts

    facts = read_machine_facts(GpuSubsetProbe(four_gpus(), (1, 6)))
    assert [g.index for g in facts.gpus] == [1]
    assert any("GPU 6 not visible (NVML sees 0, 1, 2, 3)" in n for n in facts.notes)


def test_mixed_gpu_models_are_said() -> None:
    assert gpu_mix(["NVIDIA H200", "NVIDIA H200"]) is None
    said = gpu_mix(["NVIDIA H200", "NVIDIA A100-SXM4-80GB"])
    assert said is not None and "not comparable" in said and "A100" in said


def test_compare_on_one_gpu_leases_it_and_reads_only_it(
    setup: TuningSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare --gpus 1`` while a study's engine fills GPU 0: the arms fit (GPU 1 is read, not 0),
    the engines see GPU 1 only, and GPU 1 is leased until the comparison ends."""
    monkeypatch.setenv("AUTOTUNE_GPU_LEASE_DIR", str(tmp_path / "leases"))
    probe = four_gpus(used=(70, 0, 0, 0))
    argv = ["--gpu-memory-utilization", "0.9"]
    assert setup.guard is not None
    with on_gpus(setup, None, owner="compare") as same:
        assert same is setup
    with on_gpus(setup, "1", owner="compare", probe=probe) as on1:
        assert (
            on1.guard is not None
            and on1.guard.gpus == (1,)
            and on1.guard.check(sizing_from_argv(argv, on1.guard.platform)).feasible
        )
        assert on1.launch.process_env(RenderedConfig(args=()))["CUDA_VISIBLE_DEVICES"] == "1"
        with pytest.raises(StudyBusyError, match="compare"):  # a worker asking for GPU 1 now waits its turn
            GpuLease((1,)).acquire(settle_s=0)
    with GpuLease((1,)) as again:  # released at the end
        assert again.held
    with pytest.raises(ConfigError, match="no GPU 7"), on_gpus(setup, "7", owner="compare", probe=probe):
        pass


def test_the_baseline_plan_reads_the_gpu_that_measures_it(setup: TuningSetup) -> None:
    """``run --gpus 1`` while another job fills GPU 0: vLLM's defaults fit GPU 1, where worker 0
    measures the baseline; reading GPU 0 would have swapped them for a smaller reference."""
    assert setup.guard is not None
    crowded = dataclasses.replace(
        setup, guard=dataclasses.replace(setup.guard, probe=four_gpus(used=(70, 0, 0, 0)))
    )
    assert not plan_baseline(crowded).defaults_fit  # the first visible GPU: full
    on1 = crowded.watching_gpus((1,))
    assert on1.guard is not None and on1.guard.gpus == (1,) and plan_baseline(on1).defaults_fit
    # a new setup: the one it came from still reads every GPU (its plan unchanged)
    assert crowded.guard is not None and crowded.guard.gpus is None
    assert not plan_baseline(crowded).defaults_fit


def test_a_compile_cache_given_is_shared_by_every_evaluator_and_stays_on_this_host(tmp_path: Path) -> None:
    """``--compile-cache DIR``: every evaluator (a study's, a comparison's) points vLLM's caches
    into DIR instead of its own log folder; a study records its choices without it, since a worker
    on another host keeps its own folder."""
    from autotune.space import RenderedConfig
    from autotune.tuning._fingerprint import _portable

    shared = tmp_path / "shared-cache"
    for setup in _setup(tmp_path, cpu=True):
        assert setup.evaluator(tmp_path / "study").spec.cache_dir == tmp_path / "study" / "cache"
        choices = setup.choices.model_copy(update={"compile_cache": shared})
    with build_setup(choices) as with_cache:
        for log_dir in (tmp_path / "study-a", tmp_path / "compare"):
            ev = with_cache.evaluator(log_dir)
            assert ev.spec.cache_dir == shared.resolve()
            assert ev.spec.process_env(RenderedConfig(args=()))["VLLM_CACHE_ROOT"] == str(
                shared.resolve() / "vllm"
            )
        assert _portable(with_cache.choices).compile_cache is None
