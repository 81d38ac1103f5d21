"""The end of a group study on the fake server: the best group re-measured against the baseline
group, A B A B, and exported only when it wins beyond the noise with no model worse; the export is
one YAML per model and a launch script, and no engine outlives either."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.study import split_params
from autotune.studyfile import load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import GroupEvaluator, build_group, confirm_group, export_group
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked

FLAGS = {
    "check_args": False,
    "launcher": " ".join(FAKE_LAUNCHER),
    "warmup": 0,
    "max_requests": 8,
    "speed": 10.0,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("group-export-models")
    return make_tiny_model(root / "l8", layers=8), make_tiny_model(root / "l2", layers=2)


def _group(tmp_path: Path, models: tuple[Path, Path]) -> Path:
    """Today's split starves both (12.8 MiB each: the fake triples TTFT below 16 MiB; two 2-layer
    models, whose 2,048-token request fits in that)."""
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {models[1]}, workload: {REPO / "examples" / "rag.jsonl"}}}
  - {{name: chat, model: {models[1]}, workload: {REPO / "examples" / "support_chat.jsonl"}}}
engine_args: [--max-model-len=2048]
share: {{kv_cache_memory_bytes: 64M, baseline: {{rag: 0.2, chat: 0.2}}}}
""")
    return path


def _trial(number: int, split: dict[str, float], kind: str) -> optuna.trial.FrozenTrial:
    names = ["rag", "chat"]
    params = split_params(split, names)
    dists = {k: optuna.distributions.FloatDistribution(0.0, 1.0) for k in params}
    trial = optuna.trial.create_trial(
        value=1.0, params=params, distributions=dists, user_attrs={"split": split, "group_trial": kind}
    )
    trial.number = number
    return trial


def test_a_group_that_wins_is_confirmed_and_exported_with_its_launch_script(
    tmp_path: Path, models: tuple[Path, Path], mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("AUTOTUNE_CPU_FLAGS", "avx2 avx512f avx512_bf16")  # sizes as split (no float32 rule)
    # a modelled TTFT of ~0.5 s: each model is held against its runs' spread, which on a busy host is
    # mostly HTTP overhead on the fake's default ~10 ms
    monkeypatch.setenv("FAKE_TTFT_SCALE", "50")
    group = load_group_file(_group(tmp_path, models))
    assert group is not None
    with build_group(group, FLAGS) as setup:
        evaluate = GroupEvaluator(setup, tmp_path / "logs", check_args=False)
        base = _trial(0, dict(setup.baseline), "baseline")
        even = _trial(1, {"rag": 0.5, "chat": 0.5}, "sampled")
        said: list[str] = []
        done = confirm_group(
            setup, evaluate, base, even, rounds=2, min_improvement=0.1, first_number=10,
            on_run=lambda arm, r, res: said.append(f"{arm} {r}"),
        )  # fmt: skip
        assert said == ["baseline group 0", "trial 1 0", "baseline group 1", "trial 1 1"], done.why  # A B A B
        assert done.confirmed, done.why
        assert done.value is not None and done.value < 0.9 and set(done.ratios) == {"rag", "chat"}
        # each model against the spread of its own runs (the fake's restarts spread 10-20%), not the floor alone
        assert "the noise of its own 2+2 A B runs" in done.why and "ranges do not overlap" in done.why
        assert set(done.noise) == {"rag", "chat"} and all(v >= 0.1 for v in done.noise.values())
        same = confirm_group(setup, evaluate, base, _trial(2, dict(setup.baseline), "sampled"),
                             rounds=2, min_improvement=0.1, first_number=20)  # fmt: skip
        assert not same.confirmed and same.why.endswith("not confirmed"), same.why
        # the export of the confirmed group, from the commands its engines ran
        measured = evaluate(30, {"rag": 0.5, "chat": 0.5}, {})
        for name in ("rag", "chat"):
            rec = measured.records[name]
            even.user_attrs[f"model:{name}"] = {"command": list(rec.command)}  # as the study keeps them
        written = export_group(setup, evaluate, even, tmp_path / "out", ["study 'g', group trial 1"])
    assert set(written.configs) == {"rag", "chat"}
    for name in ("rag", "chat"):
        config = yaml.safe_load(written.configs[name].read_text())
        assert config["kv-cache-memory-bytes"] == "32M" and config["max-model-len"] == 2048
        assert Path(config["model"]).is_absolute()
    launch = written.launch.read_text()
    assert launch.startswith("#!/bin/sh") and launch.count(" &  # ") == 2 and launch.rstrip().endswith("wait")
    assert "--config rag.yaml --port 8000 &" in launch and "--config chat.yaml --port 8001 &" in launch
    assert not processes_marked(mark)
