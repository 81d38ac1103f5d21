"""One group trial on the fake server: two engines started together, both workloads replayed at
once, each model's figures kept and the group scored against the baseline group; one engine that
fails to start fails the trial with its name and reason, and no engine of the group outlives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.study import TrialStatus
from autotune.studyfile import load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import GroupEvaluator, build_group
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked

FLAGS = {"check_args": False, "launcher": " ".join(FAKE_LAUNCHER), "warmup": 0, "max_requests": 12}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("group-trial-models")
    return make_tiny_model(root / "l8", layers=8), make_tiny_model(root / "l2", layers=2)


def _group_file(tmp_path: Path, models: tuple[Path, Path], chat_args: str = "") -> Path:
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - name: rag
    model: {models[0]}
    workload: {REPO / "examples" / "rag.jsonl"}
    engine_args: [--max-model-len=2048]
  - name: chat
    model: {models[1]}
    workload: {REPO / "examples" / "support_chat.jsonl"}
    engine_args: [--max-model-len=2048{chat_args}]
share:
  kv_cache_memory_bytes: 64M
""")
    return path


def _flag(command: tuple[str, ...], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_a_group_trial_measures_every_model_and_scores_the_group(
    tmp_path: Path, models: tuple[Path, Path], mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    # a bfloat16-capable CPU, so the sizes are the split's as given (float32's doubling has its own tests)
    monkeypatch.setenv("AUTOTUNE_CPU_FLAGS", "avx2 avx512f avx512_bf16")
    group = load_group_file(_group_file(tmp_path, models))
    assert group is not None
    with build_group(group, FLAGS) as setup:
        evaluate = GroupEvaluator(setup, tmp_path / "logs", check_args=False)
        base = evaluate(0, setup.baseline, {})
        assert base.ok, base.reason
        assert base.score.value == pytest.approx(1.0)  # the baseline group against itself
        for name in ("rag", "chat"):
            rec = base.records[name]
            assert rec.status == TrialStatus.OK and rec.figures is not None
            assert rec.figures.get("completed") == 12
            assert _flag(rec.command, "--kv-cache-memory-bytes") == "32M"  # its half of the group's 64M
            assert Path(rec.log_path or "").parent == tmp_path / "logs" / name  # its own log
        assert len({_flag(base.records[n].command, "--port") for n in ("rag", "chat")}) == 2  # own ports
        cores = [evaluate.evaluators[n].spec.env.get("VLLM_CPU_OMP_THREADS_BIND") for n in ("rag", "chat")]
        assert cores[0] and cores[1] and cores[0] != cores[1]  # each engine its own cores, as --workers
        evaluate.mode = "worst"  # the group by its worst model (pareto would hold the fake's noise to 3%)
        trial = evaluate(1, {"rag": 0.75, "chat": 0.25}, {}, baseline=base)
        assert trial.ok, trial.reason
        assert set(trial.score.ratios) == {"rag", "chat"}
        assert _flag(trial.records["chat"].command, "--kv-cache-memory-bytes") == "16M"
        assert trial.score.value == pytest.approx(max(trial.score.ratios.values()))
    assert not processes_marked(mark)


def test_one_engine_failing_to_start_fails_the_trial_by_name_and_stops_the_group(
    tmp_path: Path, models: tuple[Path, Path], mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("FAKE_OOM_BLOCK_SIZE", "16")  # only chat runs with --block-size 16
    group = load_group_file(_group_file(tmp_path, models, chat_args=", --block-size=16"))
    assert group is not None
    with build_group(group, FLAGS) as setup:
        result = GroupEvaluator(setup, tmp_path / "logs", check_args=False)(0, setup.baseline, {})
    assert not result.ok and result.failed_model == "chat"
    assert result.reason is not None and result.reason.startswith("chat: ")
    assert result.records["chat"].status == TrialStatus.FAILED
    assert result.records["chat"].failure == "out_of_memory"
    assert result.records["rag"].status != TrialStatus.OK  # stopped with the group, not measured alone
    assert result.score.value is None and result.score.reasons == (result.reason,)
    assert not processes_marked(mark)
