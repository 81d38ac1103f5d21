"""The group objective ``pareto`` (the default) on the fake server, through ``autotune run -f``.

The fake's time to first token depends on its KV pool in tiers (``FAKE_KV_TIERS``): below 12 MiB
2.0x, below 26 MiB 1.2x, above that 1.0x. The operator's split gives rag 10 MiB of 50 (2.0x) and
chat 40 (1.0x). Giving rag 20 MiB makes rag 0.6x and leaves chat at 1.0x, within the noise: a
one-sided gain, which ``pareto`` finds and the A B A B re-measurement confirms, while ``worst``
scores it 1.0, no gain. Giving each 25 MiB makes rag 0.6x and chat 1.2x: infeasible, named by model.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.study import ModelOutcome, group_score
from autotune.tiny_model import make_tiny_model
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked

SPACE = """\
name: one-flag
platform: cpu
parameters:
  block_size: {type: categorical, choices: [128, 64], flag: --block-size}
"""


def _study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mark: str, split_rag: float, *extra: str) -> tuple[str, list[optuna.trial.FrozenTrial]]:  # fmt: skip
    """The baseline group, then ``split_rag`` of the 50 MiB for rag (each model's block size as its
    fixed flags have it, so only the split moves a figure); the output and the study's trials."""
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("AUTOTUNE_CPU_FLAGS", "avx2 avx512f avx512_bf16")  # sizes as split (no float32 rule)
    monkeypatch.setenv("FAKE_KV_TIERS", "12M:2.0,26M:1.2")
    monkeypatch.setenv("FAKE_TTFT_SCALE", "100")  # ~1 s: the modelled TTFT, not the HTTP overhead
    l2 = make_tiny_model(tmp_path / "l2", layers=2)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l2}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}, space: {space}}}
share: {{kv_cache_memory_bytes: 50M, baseline: {{rag: 0.2, chat: 0.8}}}}
engine_args: [--max-model-len=2048]
min_improvement: 0.1
objective: ttft_p50
""")
    studies = tmp_path / "studies"
    studies.mkdir()
    study = optuna.create_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}")
    study.enqueue_trial({"split.rag": 0.2})  # the baseline group
    study.enqueue_trial({"split.rag": split_rag, "rag.block_size": 128, "chat.block_size": 128})
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--n-trials", "2", "--max-requests", "12", "--warmup", "0", "--study", "g",
            "--no-prior", "--out", str(tmp_path / "export"), *extra]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    trials = optuna.load_study(study_name="g", storage=f"sqlite:///{studies / 'g.db'}").trials
    return res.output, [
        t for t in trials if t.state.is_finished()
    ]  # the baseline's split, enqueued again, waits


def test_a_one_sided_gain_is_found_and_confirmed_under_pareto_where_worst_sees_none(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, trials = _study(tmp_path, monkeypatch, mark, 0.4)
    base, best = trials
    assert best.user_attrs["split"] == pytest.approx({"rag": 0.4, "chat": 0.6})
    ratios = best.user_attrs["group_ratios"]
    figures = {n: best.user_attrs[f"model:{n}"]["figures"] for n in ("rag", "chat")}
    assert ratios["rag"] == pytest.approx(0.6, abs=0.08), (ratios, figures)
    assert ratios["chat"] == pytest.approx(1.0, abs=0.1), (ratios, figures)
    assert best.value == pytest.approx(math.sqrt(ratios["rag"] * ratios["chat"]))  # the geometric mean
    assert best.value < base.value == pytest.approx(1.0)
    # the same measurement under worst: the group is its worst model, chat at 1.0x, no gain
    outcomes = [
        ModelOutcome(n, best.user_attrs[f"model:{n}"]["figures"]["ttft_p50"],
                     base.user_attrs[f"model:{n}"]["figures"]["ttft_p50"])
        for n in ("rag", "chat")
    ]  # fmt: skip
    worst = group_score(outcomes, direction="minimize", mode="worst").value
    assert worst is not None and worst > 0.9, worst
    # re-measured A B A B: confirmed, each model against the spread of its own runs, and exported
    line = next(ln for ln in output.splitlines() if ln.startswith("re-measured against the baseline group:"))
    assert "the noise of its own 2+2 A B runs on the shared machine" in line and "gains: rag ttft_p50" in line
    assert "not confirmed" not in line, output
    assert "worse beyond the noise" not in line
    done = next(v for k, v in (optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path / 'studies' / 'g.db'}").user_attrs.items()) if k.startswith("group_confirmation_"))  # fmt: skip
    assert done["confirmed"] is True, done
    assert "kv-cache-memory-bytes: 20M" in (tmp_path / "export" / "rag.yaml").read_text()
    assert not processes_marked(mark)


def test_a_gain_paid_for_by_another_model_is_infeasible_named_by_model(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    output, trials = _study(tmp_path, monkeypatch, mark, 0.5, "--confirm-rounds", "0")
    trade = trials[1]
    ratios = trade.user_attrs["group_ratios"]
    assert ratios["rag"] == pytest.approx(0.6, abs=0.08) and ratios["chat"] == pytest.approx(1.2, abs=0.08), (
        ratios
    )
    # infeasible, as Optuna keeps a trial without a value: PRUNED, its constraint violated, its reason
    assert trade.state is optuna.trial.TrialState.PRUNED and trade.value is None
    assert trade.constraints.get("group_feasible") == 1.0
    reason = trade.user_attrs["group_reason"]
    assert re.fullmatch(
        r"infeasible: chat p50 TTFT 1\.\d\dx its baseline, beyond the 10% noise floor", reason
    )
    line = next(ln for ln in output.splitlines() if ln.startswith("trial 1 (sampled): "))
    assert "rag 0.50 (25 MiB), chat 0.50 (25 MiB)" in line and line.endswith(f": {reason}"), line
    assert "rag" not in reason  # only the model that pays is named
    assert "the baseline group was best" in output
    assert not processes_marked(mark)
