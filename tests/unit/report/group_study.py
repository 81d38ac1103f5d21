"""A group study for the report tests: the group study loop itself (``run_group_study``) over two
tiny models, with a stand-in for the engines whose figures follow each model's share."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune.study import Figures, GroupScore, ModelOutcome, TrialRecord, TrialStatus, group_score
from autotune.studyfile import load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import build_group, check_group_fingerprint, run_group_study
from autotune.tuning.group._trial import GroupTrialResult
from tests.conftest import REPO

__all__ = ["make_group_study"]

FLAGS = {"check_args": False, "warmup": 0, "max_requests": 8}


def _evaluate(
    number: int,
    split: Mapping[str, float],
    values: Mapping[str, Mapping[str, Any]],
    baseline: GroupTrialResult | None,
) -> GroupTrialResult:
    """rag's TTFT falls as its share grows (its documents fit), chat's barely moves; a split giving
    chat under 25% fails its engine (as a start that cannot hold one request would)."""
    if split["chat"] < 0.25:
        failed = TrialRecord(
            status=TrialStatus.FAILED, failure="startup", reason="chat: engine exited (code 1)"
        )
        records = {
            "rag": TrialRecord(status=TrialStatus.OK, figures=Figures({"ttft_p90": 100.0})),
            "chat": failed,
        }
        return GroupTrialResult(
            records, GroupScore(None, {}, ("chat: engine exited",)), "chat", "chat: engine exited"
        )
    figures = {
        "rag": {"ttft_p90": 120.0 / split["rag"], "output_throughput": 50.0, "completed": 8, "failed": 0},
        "chat": {
            "ttft_p90": 40.0 - 5.0 * split["rag"],
            "output_throughput": 30.0,
            "completed": 8,
            "failed": 0,
        },
    }
    records = {n: TrialRecord(status=TrialStatus.OK, figures=Figures(f)) for n, f in figures.items()}
    base = baseline.records if baseline is not None else records
    outcomes = [
        ModelOutcome(n, f["ttft_p90"], (base[n].figures or Figures({})).get("ttft_p90"))
        for n, f in figures.items()
    ]
    return GroupTrialResult(records, group_score(outcomes, direction="minimize"))


def make_group_study(root: Path) -> optuna.Study:
    """A group study of two tiny models (rag weight 2, chat) under ``root``: the baseline group,
    the prior's split, a split whose chat engine fails and one infeasible before launch; the first
    trial after the baseline confirmed."""
    l8, l2 = make_tiny_model(root / "l8", layers=8), make_tiny_model(root / "l2", layers=2)
    path = root / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, weight: 2}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    group = load_group_file(path)
    assert group is not None
    study = optuna.create_study(
        study_name="g",
        storage=f"sqlite:///{root / 'g.db'}",
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=3),
    )
    with build_group(group, FLAGS) as setup:
        check_group_fingerprint(study, setup)
        run_group_study(setup, _evaluate, study, n_trials=2, first={"rag": 0.7, "chat": 0.3})  # type: ignore[arg-type]
        # a split whose chat engine fails, and one too small for chat to hold one request
        study.enqueue_trial({"split.rag": 0.8, "split.chat": 0.2})
        study.enqueue_trial({"split.rag": 0.95, "split.chat": 0.05})
        run_group_study(setup, _evaluate, study, n_trials=2)  # type: ignore[arg-type]
    study.set_user_attr("studies_dir", str(root))  # for the command's test
    study.set_user_attr(
        "group_confirmation_1", {"confirmed": True, "why": "group objective 0.71 on the medians"}
    )
    return study
