"""``autotune run -f group.yaml`` on the fake server: the baseline group, the prior's split, then a
sampled one; each trial the whole group, its value the group's objective, each model's figures kept."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.tiny_model import make_tiny_model
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, write_fake_space


def test_a_group_study_runs_baseline_prior_and_sampled_trials(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    space = write_fake_space(tmp_path)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}, space: {space}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    studies = tmp_path / "studies"
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--n-trials", "3", "--max-requests", "8", "--warmup", "0",
            "--study", "g"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert "trial 0 (baseline): split of 64 MiB" in res.output and "trial 2 (sampled)" in res.output
    study = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}")
    trials = study.trials
    assert [t.user_attrs["group_trial"] for t in trials] == ["baseline", "prior", "sampled"]
    assert trials[0].value == pytest.approx(1.0)  # the baseline group against itself
    assert trials[0].user_attrs["split"] == pytest.approx({"rag": 0.5, "chat": 0.5})
    for t in trials:
        for name in ("rag", "chat"):
            got = t.user_attrs[f"model:{name}"]
            assert got["status"] == "ok" and got["figures"]["completed"] == 8, got
        assert t.value == pytest.approx(max(t.user_attrs["group_ratios"].values()))
    assert any(p.startswith("rag.") for p in trials[2].params)  # the sampled trial tunes each space
    assert not processes_marked(mark)
