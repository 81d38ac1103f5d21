"""The prior's LRU prediction on block chains, and its reasoning on a real setup (tiny model)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from autotune.memory import GiB
from autotune.space import SearchSpace, load_search_space
from autotune.study import TrialRecord, TrialStatus, write_record
from autotune.trial import MemoryGuard
from autotune.tuning import TuningChoices, build_setup
from autotune.tuning._prior import _chains, build_prior, lru_hit_share
from autotune.workload import Workload, load_workload
from tests.unit.conftest import FakeProbe, config_path, h100

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_lru_predicts_hits_until_the_cache_is_smaller_than_what_is_reused() -> None:
    doc_a, doc_b = list(range(64)), list(range(100, 164))
    # a, b, a, b: with room for both documents the second visits hit; with room for one, nothing does
    prompts = [[*doc_a, 1000 + i] for i in range(2)] + [[*doc_b, 2000 + i] for i in range(2)]
    order = [prompts[0], prompts[2], prompts[1], prompts[3]]
    ch = _chains(order, 16)
    assert ch.distinct == 8 and ch.prompt_tokens == 4 * 65
    assert lru_hit_share(ch, 10_000) == pytest.approx(2 * 64 / 260)
    assert lru_hit_share(ch, 128) == pytest.approx(2 * 64 / 260)  # both documents fit exactly
    assert lru_hit_share(ch, 64) == 0.0  # one document's room: each evicts the other


def test_the_shared_head_of_a_prompt_outlives_its_tail() -> None:
    head = list(range(32))
    prompts = [head + list(range(1000 + 100 * i, 1000 + 100 * i + 32)) + [9] for i in range(3)]
    ch = _chains(prompts, 16)
    # room for 3 blocks: each request leaves head (2 blocks) most recent, so the next one hits them
    assert lru_hit_share(ch, 48) == pytest.approx(2 * 2 * 16 / (3 * 65))


def _workload(path: Path, docs: int, words: int, repeats: int) -> Path:
    with path.open("w") as f:
        for r in range(repeats):
            for d in range(docs):
                doc = " ".join(f"d{d}w{i}" for i in range(words))
                f.write(json.dumps({"prompt": f"{doc} question {r}", "max_tokens": 2}) + "\n")
    return path


def test_the_prior_enqueues_the_best_predicted_memory_setting_and_explains_it(
    tmp_path: Path, tiny_model: Path
) -> None:
    wl = _workload(tmp_path / "w.jsonl", docs=6, words=200, repeats=3)
    choices = TuningChoices(workload=wl, model=str(tiny_model), engine_args=("--max-model-len=2048",))
    with build_setup(choices) as setup:
        prior = setup.apply_prior()
        assert prior is not None
        text = "\n".join(prior.lines)
        assert "working set" in text and "predicted prefix hits" in text
        best = prior.candidates[0]
        assert best["kv_cache_memory_bytes"] == max(
            setup.space.parameters["kv_cache_memory_bytes"].choices or ()
        )
        small = prior.predict({**best, "kv_cache_memory_bytes": 8})
        large = prior.predict(best)
        assert large["prefix_hit_gpu"] > small["prefix_hit_gpu"]  # a pool smaller than the working set evicts
        assert large["prefix_hit_gpu"] == pytest.approx(large["prefix_hit_bound"])
        study = optuna.create_study()
        assert prior.enqueue(study) == prior.candidates
        assert prior.enqueue(study) == []  # already queued: not twice


GPU_SPACE = """
name: g
platform: cuda
parameters:
  gpu_memory_utilization: {type: categorical, choices: [0.3], flag: --gpu-memory-utilization}
  block_size: {type: categorical, choices: [16], flag: --block-size, default: 16}
  cpu_swap_space_gb:
    type: categorical
    choices: [0, 8, 16, 64]
    flag: --kv-offloading-size
    off_value: 0
"""


@dataclass
class _Inputs:
    """A GPU set-up without a GPU: a Llama-3-8B shape on a fake H100 (the memory estimate is real)."""

    space: SearchSpace
    workload: Workload
    guard: MemoryGuard | None
    model: str

    def engine_argv(self, tuned_args: Sequence[str] = ()) -> list[str]:
        return ["--max-model-len", "8192", *tuned_args]

    def fit_reasons(self, tuned_args: Sequence[str] = ()) -> tuple[str, ...]:
        assert self.guard is not None
        return tuple(self.guard.check(self.engine_argv(tuned_args)).reasons)


def _gpu_inputs(tmp_path: Path, docs: int) -> _Inputs:
    model = tmp_path / "llama-3-8b"
    model.mkdir()
    shutil.copy(config_path("llama-3-8b"), model / "config.json")
    probe = FakeProbe(gpu_list=[h100()], host=(256 * GiB, 200 * GiB))
    guard = MemoryGuard.for_model(str(model), "cuda", probe=probe)
    (tmp_path / "space.yaml").write_text(GPU_SPACE)
    wl = load_workload(_workload(tmp_path / "w.jsonl", docs=docs, words=1000, repeats=3))
    return _Inputs(load_search_space(tmp_path / "space.yaml"), wl, guard, str(model))


def test_a_working_set_larger_than_the_gpu_kv_gets_the_smallest_pool_that_holds_it(tmp_path: Path) -> None:
    prior = build_prior(_gpu_inputs(tmp_path, docs=60))  # ~60k words against ~40k tokens of GPU KV
    assert prior.offload_helps is True
    assert [c.get("cpu_swap_space_gb") for c in prior.candidates] == [None, 8]
    p = prior.predict(prior.candidates[1])
    assert (
        p["prefix_hit_with_pool"] > p["prefix_hit_gpu"] + 0.5
    )  # a cyclic re-read: LRU on the GPU alone misses
    assert prior.space.parameters["cpu_swap_space_gb"].choices == (0, 8)  # 16 and 64 GiB hold nothing more
    assert any("pool sizes above 8 GiB dropped" in line for line in prior.lines)
    assert prior.veto(optuna.create_study(), {"cpu_swap_space_gb": 8}) is None  # it can help: never vetoed


def test_when_the_working_set_fits_the_gpu_offload_is_measured_once_then_vetoed(tmp_path: Path) -> None:
    prior = build_prior(_gpu_inputs(tmp_path, docs=8))
    assert prior.offload_helps is False
    assert prior.candidates[1]["cpu_swap_space_gb"] == 8  # the one check
    study = optuna.create_study()
    assert prior.veto(study, {"cpu_swap_space_gb": 16}) is None  # no offload measured yet
    study.enqueue_trial({"cpu_swap_space_gb": 8})  # a measured offload trial
    t = study.ask({"cpu_swap_space_gb": optuna.distributions.CategoricalDistribution((0, 8, 16, 64))})
    assert t.params["cpu_swap_space_gb"] == 8
    write_record(t, TrialRecord(status=TrialStatus.OK))
    study.tell(t, 1.0)
    why = prior.veto(study, {"cpu_swap_space_gb": 16})
    assert why is not None and "trial 0 already checked offload" in why
    assert prior.veto(study, {"cpu_swap_space_gb": 0}) is None


def test_a_best_setting_at_vllms_defaults_is_left_to_the_baseline(tmp_path: Path) -> None:
    """The memory setting predicted best is vLLM's defaults (every value at the space's default):
    the baseline measures it, so only the pool candidate is enqueued, not a second defaults run."""
    inputs = _gpu_inputs(tmp_path, docs=60)
    params = dict(inputs.space.parameters)
    util = params["gpu_memory_utilization"]
    params["gpu_memory_utilization"] = util.model_copy(update={"default": 0.3})
    inputs.space = inputs.space.model_copy(update={"parameters": params})
    prior = build_prior(inputs)
    assert [c.get("cpu_swap_space_gb") for c in prior.candidates] == [8]
    assert any("the baseline measures it" in line for line in prior.lines)


@dataclass
class _Fp8Inputs(_Inputs):
    def engine_argv(self, tuned_args: Sequence[str] = ()) -> list[str]:
        return ["--max-model-len", "8192", "--kv-cache-dtype", "fp8", *tuned_args]


def test_an_fp8_kv_cache_holds_twice_the_tokens_on_the_gpu_and_in_the_host_pool(tmp_path: Path) -> None:
    """The host pool holds the GPU's blocks as they are: with ``--kv-cache-dtype fp8`` fixed, 8 GiB
    of pool hold twice the tokens (the prior counted bf16 bytes there, and so sized pools 2x too big)."""
    bf16 = _gpu_inputs(tmp_path, docs=60)
    fp8 = _Fp8Inputs(bf16.space, bf16.workload, bf16.guard, bf16.model)
    values = {"gpu_memory_utilization": 0.3, "block_size": 16, "cpu_swap_space_gb": 8}
    wide, narrow = build_prior(bf16).capacity(values), build_prior(fp8).capacity(values)
    assert wide is not None and narrow is not None
    assert narrow[0] >= 2 * wide[0] - 16  # GPU KV tokens (whole blocks)
    assert narrow[2] == 2 * wide[2] == 2 * (8 * GiB // (128 * 1024))  # Llama-3-8B: 128 KiB a token in bf16
