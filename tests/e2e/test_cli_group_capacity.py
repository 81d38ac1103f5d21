"""Capacity at an SLO for a group (issue 46), on the fake server, through ``autotune run -f``.

A group's capacity is the highest multiplier of every model's workload at which every model keeps
its own SLO. The fake serves one request at a time (FAKE_SERIAL=1), about 50 ms each, three times
that with a KV pool below 16 MiB. The operator's split gives rag 10 MiB of 50 (starved) and chat 40:
rag breaks its SLO first and holds the whole group down. A split of 20 and 30 MiB starves neither,
and the group carries more. Each engine replays its own workload (rag 5 req/s, chat 4 req/s at 1x);
their levels run in step, so every model's bracket has the same multipliers, a level broken by one
model is broken for the group (named by model), and each model's capacity is its own workload's
rate at the group's multiplier. Nothing here is a measurement of vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.tiny_model import make_tiny_model
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, processes_marked

SPACE = """\
name: one-value
platform: cpu
parameters:
  max_num_seqs: {type: categorical, choices: [128], flag: --max-num-seqs}
"""


def _workload(path: Path, step: float) -> Path:
    with path.open("w") as f:
        for i in range(30):
            f.write(
                json.dumps({"prompt": f"q{i} " + "word " * 20, "max_tokens": 4, "timestamp": i * step}) + "\n"
            )
    return path


def _levels(trial: optuna.trial.FrozenTrial, name: str) -> list[dict[str, object]]:
    return list(trial.user_attrs[f"model:{name}"]["figures"]["capacity_levels"])


def test_a_groups_capacity_is_the_load_every_model_holds_at_once(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("AUTOTUNE_CPU_FLAGS", "avx2 avx512f avx512_bf16")  # sizes as split (no float32 rule)
    monkeypatch.setenv("FAKE_SERIAL", "1")
    monkeypatch.setenv("FAKE_TTFT_SCALE", "6")
    l2 = make_tiny_model(tmp_path / "l2", layers=2)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    rag, chat = _workload(tmp_path / "rag.jsonl", 0.2), _workload(tmp_path / "chat.jsonl", 0.25)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l2}, workload: {rag}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {chat}, space: {space}}}
share: {{kv_cache_memory_bytes: 50M, baseline: {{rag: 0.2, chat: 0.8}}}}
engine_args: [--max-model-len=2048]
objective: capacity
slo: [ttft_p90=250ms]
capacity_levels: 3
capacity_tolerance: 0.5
capacity_min_level: 0s
min_improvement: 0.2
""")
    studies = tmp_path / "studies"
    studies.mkdir()
    storage = f"sqlite:///{studies / 'g.db'}"
    study = optuna.create_study(study_name="g", storage=storage)
    study.enqueue_trial({"split.rag": 0.2})  # the baseline group
    study.enqueue_trial({"split.rag": 0.4, "rag.max_num_seqs": 128, "chat.max_num_seqs": 128})
    args = ["run", "-f", str(path), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(studies),
            "--no-check-args", "--no-check-memory", "--n-trials", "2", "--warmup", "0", "--study", "g",
            "--no-prior", "--confirm-rounds", "0", "--out", str(tmp_path / "export")]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    base, wide = [
        t for t in optuna.load_study(study_name="g", storage=storage).trials if t.state.is_finished()
    ]
    for trial in (base, wide):
        rag_levels, chat_levels = _levels(trial, "rag"), _levels(trial, "chat")
        # in step: the same multipliers, and one verdict a level for the group
        assert [lv["x"] for lv in rag_levels] == [lv["x"] for lv in chat_levels]
        assert [lv["held"] for lv in rag_levels] == [lv["held"] for lv in chat_levels]
        figures = {n: trial.user_attrs[f"model:{n}"]["figures"] for n in ("rag", "chat")}
        # each model's capacity is its own rate at the group's multiplier (rag 5, chat 4 req/s at 1x)
        assert figures["rag"]["capacity"] / 5 == pytest.approx(figures["chat"]["capacity"] / 4, rel=0.02)
    # the baseline group: rag, starved, breaks first; chat's level breaks because rag's did, named
    broke = [lv for lv in _levels(base, "chat") if not lv["held"]]
    assert broke and all(str(lv["broke"]).startswith("rag: ") for lv in broke), broke
    # the split that starves neither carries more: its multiplier above the baseline's, a gain
    multiplier = {t.number: t.user_attrs["model:rag"]["figures"]["capacity"] / 5 for t in (base, wide)}
    assert multiplier[wide.number] > multiplier[base.number], multiplier
    assert base.value == pytest.approx(1.0) and wide.value is not None and wide.value < 1.0
    line = next(ln for ln in res.output.splitlines() if ln.startswith("trial 1 (sampled): "))
    assert f"the group holds {multiplier[wide.number]:.3g}x every model's traffic at once (rag " in line, line
    assert "kv-cache-memory-bytes: 20M" in (tmp_path / "export" / "rag.yaml").read_text()
    assert not processes_marked(mark)
