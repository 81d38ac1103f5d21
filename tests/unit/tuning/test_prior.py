"""The prior's LRU prediction on block chains, and its reasoning on a real setup (tiny model)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from autotune.bench import ArrivalSpec
from autotune.engine import VLLM, EngineSizing, sizing_from_argv
from autotune.memory import GiB
from autotune.space import EngineConfig, SearchSpace, load_search_space
from autotune.study import TrialRecord, TrialStatus, write_record
from autotune.studyfile import StudySpec
from autotune.trial import MemoryGuard
from autotune.tuning import build_setup
from autotune.tuning._prior import build_prior, lru_hit_share
from autotune.tuning._prior_lru import chains_of as _chains
from autotune.tuning._prior_seqs import peak_concurrency
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
    choices = StudySpec(workload=wl, model=str(tiny_model), engine_args=("--max-model-len=2048",))
    with build_setup(choices) as built:
        setup = built.with_prior()
        prior = setup.prior
        assert prior is not None
        text = "\n".join(prior.lines)
        assert "working set" in text and "predicted prefix hits" in text
        # each value as its flag takes it, with its unit (it printed kv_cache_memory_bytes=128)
        assert re.search(r"best memory setting kv_cache_memory_bytes=\d+M", text), text
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

        for candidate in prior.candidates:  # measured on night 1
            trial = study.ask()
            for name, value in candidate.items():
                trial.suggest_categorical(name, [value])
            trial.set_user_attr("night", 1)
            study.tell(trial, 1.0)
        assert prior.enqueue(study) == []  # measured: not again
        # after a new day's traffic (a night's scope), a figure on another workload stands for nothing
        assert prior.enqueue(study, scope={"night": 2}) == prior.candidates


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
    arrival: ArrivalSpec | None = None

    def engine_argv(self, tuned_args: Sequence[str] = ()) -> list[str]:
        return ["--max-model-len", "8192", *tuned_args]

    def sizing(self, config: EngineConfig | None = None) -> EngineSizing:
        platform = self.guard.platform if self.guard is not None else "cuda"
        return sizing_from_argv(self.engine_argv(VLLM.render(config or EngineConfig()).args), platform)

    def fit_reasons(self, config: EngineConfig | None = None) -> tuple[str, ...]:
        assert self.guard is not None
        return tuple(self.guard.check(self.sizing(config)).reasons)


def _gpu_inputs(tmp_path: Path, docs: int, space: str = GPU_SPACE) -> _Inputs:
    model = tmp_path / "llama-3-8b"
    model.mkdir()
    shutil.copy(config_path("llama-3-8b"), model / "config.json")
    probe = FakeProbe(gpu_list=[h100()], host=(256 * GiB, 200 * GiB))
    guard = MemoryGuard.for_model(str(model), "cuda", probe=probe)
    (tmp_path / "space.yaml").write_text(space)
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


CACHING_SPACE = (
    GPU_SPACE
    + """
  enable_prefix_caching: {type: bool, flag: --enable-prefix-caching, default: true}
"""
)


def _measured(study: optuna.Study, params: dict[str, object]) -> None:
    """One trial measured with ``params`` (as the study would record it)."""
    dists = {
        "cpu_swap_space_gb": optuna.distributions.CategoricalDistribution((0, 8, 16, 64)),
        "enable_prefix_caching": optuna.distributions.CategoricalDistribution((True, False)),
    }
    study.enqueue_trial(params)
    t = study.ask({k: v for k, v in dists.items() if k in params})
    write_record(t, TrialRecord(status=TrialStatus.OK))
    study.tell(t, 1.0)


def test_with_prefix_caching_off_a_host_pool_still_serves_repeated_prompts_and_is_not_vetoed(
    tmp_path: Path,
) -> None:
    """H200, issue 31: with caching off the native OffloadingConnector serves repeated prompt tokens
    from its host pool. The old prior predicted 0% with and without the pool and vetoed it as "the
    working set fits the GPU KV (47,232 tokens" while the working set was 228,384 tokens."""
    prior = build_prior(_gpu_inputs(tmp_path, docs=60, space=CACHING_SPACE))
    off = {
        "gpu_memory_utilization": 0.3,
        "block_size": 16,
        "enable_prefix_caching": False,
        "cpu_swap_space_gb": 8,
    }
    p = prior.predict(off)
    assert p["prefix_hit_gpu"] == 0.0 and p["prefix_hit_with_pool"] > 0.5
    assert p["working_set_tokens"] > p["gpu_kv_tokens"]
    study = optuna.create_study()
    _measured(study, {"cpu_swap_space_gb": 8, "enable_prefix_caching": True})
    assert prior.veto(study, off) is None


def test_the_offload_veto_says_the_working_set_and_the_gpu_kv_the_prior_computed(tmp_path: Path) -> None:
    prior = build_prior(_gpu_inputs(tmp_path, docs=8, space=CACHING_SPACE))
    study = optuna.create_study()
    _measured(study, {"cpu_swap_space_gb": 8, "enable_prefix_caching": True})
    on = {"gpu_memory_utilization": 0.3, "block_size": 16, "cpu_swap_space_gb": 16}
    p = prior.predict(on)
    why = prior.veto(study, on)
    assert why is not None and p["working_set_tokens"] <= p["gpu_kv_tokens"]
    assert why.startswith(
        f"offload cannot add prefix hits here: the working set ({p['working_set_tokens']:,} tokens) fits the "
        f"GPU KV ({p['gpu_kv_tokens']:,} tokens; "
    )
    # caching off, pool on, little reuse left for the pool: the reason says so, not "fits the GPU KV"
    (tmp_path / "u").mkdir()
    no_reuse = build_prior(_gpu_inputs(tmp_path / "u", docs=8, space=CACHING_SPACE))
    no_reuse._prompts = [list(range(i * 5000, i * 5000 + 1000)) for i in range(8)]  # nothing repeats
    no_reuse._chains.clear()
    no_reuse._hits.clear()
    why = no_reuse.veto(study, {**on, "enable_prefix_caching": False})
    assert why is not None and "with prefix caching off the GPU keeps no prefixes" in why
    assert "fits the GPU KV" not in why


def test_prefix_caching_off_without_a_pool_at_high_reuse_is_measured_once_then_vetoed(tmp_path: Path) -> None:
    prior = build_prior(_gpu_inputs(tmp_path, docs=8, space=CACHING_SPACE))  # each document read 3 times
    off = {
        "gpu_memory_utilization": 0.3,
        "block_size": 16,
        "enable_prefix_caching": False,
        "cpu_swap_space_gb": 0,
    }
    assert prior.predict(off)["prefix_hit_if_caching"] > 0.6
    study = optuna.create_study()
    _measured(study, {"cpu_swap_space_gb": 0, "enable_prefix_caching": True})
    assert prior.veto(study, off) is None  # not checked yet: measured once
    _measured(study, {"cpu_swap_space_gb": 0, "enable_prefix_caching": False})
    why = prior.veto(study, off)
    assert why is not None and "caching on predicts" in why
    assert why.endswith("and trial 1 already checked prefix caching off without a host pool")
    assert prior.veto(study, {**off, "enable_prefix_caching": True}) is None


SEQS_SPACE = (
    GPU_SPACE
    + """
  max_num_seqs: {type: categorical, choices: [8, 16, 64, 256], flag: --max-num-seqs, default: 16}
"""
)


def test_max_num_seqs_below_the_workloads_concurrency_is_never_proposed(tmp_path: Path) -> None:
    inputs = _gpu_inputs(tmp_path, docs=8, space=SEQS_SPACE)
    inputs.arrival = ArrivalSpec(mode="closed", concurrency=20)
    prior = build_prior(inputs)
    assert prior.space.parameters["max_num_seqs"].choices == (64, 256)
    assert all(c["max_num_seqs"] == 64 for c in prior.candidates)  # vLLM's default (16) would queue
    text = "\n".join(prior.lines)
    assert "closed loop: 20 sessions in flight" in text and "max_num_seqs below 20 would queue" in text
    assert "requests of the workload's mean length at once" in text


def test_open_loop_arrivals_count_overlapping_requests_as_a_lower_bound(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    # one request every 0.1 s for 5 s, each generating 200 tokens: >= 1 s each at 5 ms a token
    path.write_text(
        "".join(json.dumps({"prompt": "p", "max_tokens": 200, "timestamp": i / 10}) + "\n" for i in range(50))
    )
    conc = peak_concurrency(load_workload(path), ArrivalSpec(mode="timestamps"))
    assert conc is not None and conc.peak == 10
    twice = peak_concurrency(load_workload(path), ArrivalSpec(mode="timestamps", speed=2.0))
    assert twice is not None and twice.peak == 20


DTYPE_SPACE = (
    GPU_SPACE
    + """
  kv_cache_dtype:
    type: categorical
    choices: [auto, fp8]
    flag: --kv-cache-dtype
    default: auto
    opt_in: fp8 KV changes numerics
"""
)


def test_an_opted_in_fp8_kv_is_proposed_when_its_doubled_capacity_holds_the_working_set(
    tmp_path: Path,
) -> None:
    inputs = _gpu_inputs(tmp_path, docs=60, space=DTYPE_SPACE)  # ~60k tokens against ~40k of bf16 KV
    assert "kv_cache_dtype" not in build_prior(inputs).candidates[0]  # not enabled: never proposed
    inputs.space = inputs.space.with_opt_in(["kv_cache_dtype"])
    prior = build_prior(inputs)
    assert prior.candidates[0]["kv_cache_dtype"] == "fp8"
    auto = prior.predict({**prior.candidates[0], "kv_cache_dtype": "auto"})
    fp8 = prior.predict(prior.candidates[0])
    assert fp8["gpu_kv_tokens"] >= 2 * auto["gpu_kv_tokens"] - 16
    assert fp8["prefix_hit_gpu"] > auto["prefix_hit_gpu"] + 0.3
    line = next(x for x in prior.lines if x.startswith("prior: kv_cache_dtype at that setting"))
    assert "fp8 chosen: fp8 KV changes numerics" in line
    # a pool's tokens at the chosen dtype: 8 GiB hold twice the fp8 tokens
    assert prior.predict({**prior.candidates[0], "cpu_swap_space_gb": 8})["pool_tokens"] == 2 * (
        8 * GiB // (128 * 1024)
    )


RENAMED_SPACE = """
name: renamed
platform: cuda
parameters:
  memory_share: {role: gpu_share, type: categorical, choices: [0.3], flag: --gpu-memory-utilization}
  kv_block: {role: block_size, type: categorical, choices: [16], flag: --block-size, default: 16}
  caching: {role: prefix_caching, type: bool, flag: --enable-prefix-caching, default: true}
  host_pool:
    role: kv_pool
    type: categorical
    choices: [0, 8, 16, 64]
    flag: --kv-offloading-size
    off_value: 0
"""


def test_a_space_that_renames_its_parameters_keeps_the_priors_pool_candidates_and_vetoes(
    tmp_path: Path,
) -> None:
    """The prior finds the pool, the block size and prefix caching by role (it knew the names
    ``cpu_swap_space_gb``, ``block_size``, ... by heart, so a renamed space got no pool candidate)."""
    prior = build_prior(_gpu_inputs(tmp_path, docs=60, space=RENAMED_SPACE))
    assert prior.offload_helps is True
    assert [c.get("host_pool") for c in prior.candidates] == [None, 8]
    assert prior.space.parameters["host_pool"].choices == (0, 8)
    (tmp_path / "fits").mkdir()
    fits = build_prior(_gpu_inputs(tmp_path / "fits", docs=8, space=RENAMED_SPACE))
    study = optuna.create_study()
    study.enqueue_trial({"host_pool": 8})
    t = study.ask({"host_pool": optuna.distributions.CategoricalDistribution((0, 8, 16, 64))})
    write_record(t, TrialRecord(status=TrialStatus.OK))
    study.tell(t, 1.0)
    why = fits.veto(study, {"memory_share": 0.3, "kv_block": 16, "host_pool": 16})
    assert why is not None and "trial 0 already checked offload" in why
    off = {"memory_share": 0.3, "kv_block": 16, "caching": False, "host_pool": 0}
    assert fits.predict(off)["prefix_hit_gpu"] == 0.0  # caching off, by role
