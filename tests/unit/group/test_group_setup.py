"""A group of two tiny models assembled: the budget for the platform, the operator's split, the
budget's parameter out of each space, the one-request rule per model and the prior's first split."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import pytest

from autotune.errors import ConfigError, WorkloadError
from autotune.study import suggest_member, suggest_split
from autotune.studyfile import GroupFile, load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import (
    GROUP_FINGERPRINT_ATTR,
    build_group,
    check_group_fingerprint,
    group_fingerprint,
    prior_split,
)
from tests.conftest import REPO

FLAGS = {"check_args": False}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("group-models")
    return make_tiny_model(root / "l8", layers=8), make_tiny_model(root / "l2", layers=2)


def group_yaml(
    models: tuple[Path, Path], share: str = "kv_cache_memory_bytes: 48M", rag_args: str = ""
) -> str:
    return f"""\
models:
  - name: rag
    model: {models[0]}
    workload: {REPO / "examples" / "rag.jsonl"}
    engine_args: [--enforce-eager, --max-model-len=2048{rag_args}]
  - name: chat
    model: {models[1]}
    workload: {REPO / "examples" / "support_chat.jsonl"}
    engine_args: [--enforce-eager, --max-model-len=2048]
share:
  {share}
"""


def _group(tmp_path: Path, text: str) -> GroupFile:
    path = tmp_path / "group.yaml"
    path.write_text(text)
    found = load_group_file(path)
    assert found is not None
    return found


def test_the_split_sets_the_budget_and_never_passes_it(tmp_path: Path, models: tuple[Path, Path]) -> None:
    with build_group(_group(tmp_path, group_yaml(models)), FLAGS) as group:
        assert group.baseline == {"rag": 0.5, "chat": 0.5} and group.baseline_source == "equal split"
        for m in group.models:  # the split sets the KV size: not each model's own search
            assert "kv_cache_memory_bytes" not in m.setup.space.parameters
            assert not any("kv_cache_memory_bytes" in line for line in m.setup.space_lines())
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
        for _ in range(100):
            trial = study.ask()
            split = suggest_split(trial, group.names)
            values = {m.name: suggest_member(trial, m.name, m.setup.space) for m in group.models}
            study.tell(trial, 0.0)
            assert sum(group.budget.used(split[n]) for n in group.names) <= 48 * 2**20
            argv = [group.models[0].argv(group.budget, split["rag"], values["rag"])]
            assert sum(a.startswith("--kv-cache-memory-bytes") for a in argv[0]) == 1


def test_a_share_too_small_for_one_request_is_infeasible_before_launch_named_by_model(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    with build_group(_group(tmp_path, group_yaml(models)), FLAGS) as group:
        assert group.infeasible(group.baseline) == ()
        reasons = group.infeasible({"rag": 0.1, "chat": 0.9})
        assert len(reasons) == 1 and reasons[0].startswith("rag: its share (4 MiB) holds"), reasons
        assert "less than one request of max_model_len 2,048" in reasons[0]


def test_the_priors_first_split_gives_the_kv_to_the_model_whose_working_set_needs_it(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    with build_group(_group(tmp_path, group_yaml(models)), FLAGS) as group:
        prior = prior_split(group)
        assert prior.split is not None
        assert prior.split["rag"] > prior.split["chat"] > 0, prior.lines
        assert sum(prior.split.values()) <= 1 + 1e-9
        assert group.infeasible(prior.split) == ()
        line = prior.lines[0]
        assert "rag: working set" in line and "chat: working set" in line and "B/token" in line
        assert f"split {prior.split['rag']:.2f}/{prior.split['chat']:.2f}" in line


def test_the_operators_gpu_shares_are_the_baseline_within_the_groups_share(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    text = group_yaml(models, "gpu_memory_utilization: 0.9\n  baseline: {rag: 0.45, chat: 0.45}")
    with build_group(_group(tmp_path, text), {**FLAGS, "profile": "cuda-native", "dry_run": True}) as group:
        assert group.budget.flag == "--gpu-memory-utilization"
        assert group.baseline == pytest.approx({"rag": 0.5, "chat": 0.5})
        assert group.budget.value(group.baseline["rag"]) == "0.450"
    over = group_yaml(models, "gpu_memory_utilization: 0.8\n  baseline: {rag: 0.45, chat: 0.45}")
    refused = pytest.raises(ConfigError, match=r"group.yaml:12: share.baseline: the shares sum to 0.9, above")
    with refused, build_group(_group(tmp_path, over), {**FLAGS, "profile": "cuda-native", "dry_run": True}):
        pass


@pytest.mark.parametrize(
    ("share", "rag_args", "needle"),
    [
        ("gpu_memory_utilization: 0.5", "", r"group.yaml:11: share.gpu_memory_utilization: the CPU build has no"),
        ("host_pool_gb: 8", "", r"group.yaml:11: share.host_pool_gb: the CPU build has no KV-offload pool"),
        ("{}", "", r"share.kv_cache_memory_bytes is required on the CPU build"),
        ("kv_cache_memory_bytes: 48M", ", --kv-cache-memory-bytes=8M", r"group.yaml:2: models.rag.engine_args: "
         r"--kv-cache-memory-bytes is the group's split"),
    ],
)  # fmt: skip
def test_a_share_the_platform_lacks_or_a_model_fixing_its_share_is_one_line(
    tmp_path: Path, models: tuple[Path, Path], share: str, rag_args: str, needle: str
) -> None:
    with (
        pytest.raises(ConfigError, match=needle) as err,
        build_group(_group(tmp_path, group_yaml(models, share, rag_args)), FLAGS),
    ):
        pass
    assert "\n" not in str(err.value) and "fix:" in str(err.value)


def test_one_models_bad_workload_is_named_by_model_and_line(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    bad = tmp_path / "chat.jsonl"
    lines = (REPO / "examples" / "support_chat.jsonl").read_text().splitlines()
    bad.write_text("\n".join([*itertools.islice(lines, 2), '{"prompt": 3}', *lines[2:]]) + "\n")
    text = group_yaml(models).replace(str(REPO / "examples" / "support_chat.jsonl"), str(bad))
    with pytest.raises(WorkloadError) as err, build_group(_group(tmp_path, text), FLAGS):
        pass
    msg = str(err.value)
    assert msg.startswith("model chat: ") and f"{bad}:3" in msg, msg


def test_offload_pools_past_the_groups_host_pool_are_infeasible_before_launch(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    text = group_yaml(models, "gpu_memory_utilization: 0.9\n  host_pool_gb: 8")
    with build_group(_group(tmp_path, text), {**FLAGS, "profile": "cuda-native", "dry_run": True}) as group:
        assert group.host_pool_gib == 8
        pool = {"cpu_swap_space_gb": 8}
        assert group.pools_over({"rag": pool, "chat": {"cpu_swap_space_gb": 0}}) is None
        why = group.pools_over({"rag": pool, "chat": pool})
        assert why == "the KV-offload pools (rag 8, chat 8 GiB) pass the group's host pool of 8 GiB"


def test_gpu_shares_that_fit_alone_but_not_together_are_infeasible_by_nvmls_free_memory() -> None:
    """On GPUs each engine's own check sees the whole free memory; two engines started together
    need the sum of their shares (issue 39: checked against NVML's free memory before launch)."""
    from autotune.memory import GiB, GpuMemory
    from autotune.tuning.group._setup import gpus_over

    gpu = GpuMemory(index=0, name="H200", total=140 * GiB, free=100 * GiB, used=40 * GiB)
    assert gpus_over({"qwen": 0.45, "coder": 0.2}, [gpu]) is None  # 91 GiB of 100 free
    why = gpus_over({"qwen": 0.45, "coder": 0.45}, [gpu])  # 126 GiB: each alone (63) would start
    assert why is not None and "0.900 of GPU 0's 140.0 GiB: 126.0 GiB" in why and "(100.0 GiB, NVML)" in why
    other = GpuMemory(index=1, name="H200", total=140 * GiB, free=60 * GiB, used=80 * GiB)
    assert "GPU 1" in (gpus_over({"qwen": 0.45}, [gpu, other]) or "")  # every GPU the group runs on


@pytest.mark.parametrize(
    ("flags", "file_key", "said"),
    [
        ({"workers": 2}, "", "--workers 2: "),
        ({"prune": True}, "", "--prune: "),
        ({"gpus": "0,1"}, "", "--gpus 0,1: "),
        ({}, "workers: 3", "group.yaml:12: workers: 3: this file"),
        ({}, "timeout: 600", "group.yaml:12: timeout: 600: this file"),
    ],
)
def test_what_a_group_study_does_not_do_is_refused_by_name_not_dropped(
    tmp_path: Path, models: tuple[Path, Path], flags: dict[str, object], file_key: str, said: str
) -> None:
    """A flag or study-file key that a one-engine study honours and a group study would not (workers,
    pruning, GPU pinning, a time limit) is a one-line error naming it; what the group does anyway
    (--workers 1, --no-prune) passes."""
    text = group_yaml(models) + (f"{file_key}\n" if file_key else "")
    with (
        pytest.raises(ConfigError, match="is a study of several models on one server") as got,
        build_group(_group(tmp_path, text), {**FLAGS, **flags}),
    ):
        pass
    assert said in str(got.value) and "(fix: " in str(got.value) and "\n" not in str(got.value)
    with build_group(_group(tmp_path, group_yaml(models)), {**FLAGS, "workers": 1, "prune": False}):
        pass


def test_the_group_objective_is_in_the_fingerprint_and_a_study_made_before_it_opens_under_worst(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    """Trials scored by one objective are not compared with another's: changing group_objective is
    another study. A study recorded before the key scored its trials by worst, the only mode then."""
    study = optuna.create_study(study_name="g")
    with build_group(_group(tmp_path, group_yaml(models)), FLAGS) as setup:
        old = {k: v for k, v in group_fingerprint(setup).items() if k != "group_objective"}
        study.set_user_attr(GROUP_FINGERPRINT_ATTR, old)  # as this version's predecessor recorded it
        assert group_fingerprint(setup)["group_objective"]["what"] == "group_objective pareto"
        with pytest.raises(ConfigError) as err:
            check_group_fingerprint(study, setup)
    assert "group_objective: the study measures group_objective worst [worst], this run group_objective " \
        "pareto [pareto]" in str(err.value)  # fmt: skip
    assert (
        "(fix: the study's group file as it was, with group_objective: worst, or a new --study name)"
        in str(err.value)
    )
    with build_group(_group(tmp_path, group_yaml(models) + "group_objective: worst\n"), FLAGS) as setup:
        check_group_fingerprint(study, setup)  # it opens, and now records its objective
        assert study.user_attrs[GROUP_FINGERPRINT_ATTR]["group_objective"]["sha"] == "worst"
        check_group_fingerprint(study, setup)
    with (
        build_group(_group(tmp_path, group_yaml(models) + "group_objective: weighted_sum\n"), FLAGS) as setup,
        pytest.raises(ConfigError, match="with group_objective: worst"),
    ):
        check_group_fingerprint(study, setup)
