"""A group night's verdict on the deployed group: under the pareto objective a re-measured group can
be infeasible only because one model is worse than tonight's baseline group; that is a measured figure
(its worst model's ratio, held against the floor in every round), not a group that no longer runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from autotune.nightly._group_night import _GroupNight
from autotune.study._group_objective import GroupScore
from autotune.study._record import TrialStatus
from autotune.tuning.group._trial import GroupTrialResult


def _result(score: GroupScore, *, ok: bool = True) -> GroupTrialResult:
    rec = SimpleNamespace(status=TrialStatus.OK if ok else TrialStatus.FAILED, figures={} if ok else None)
    return GroupTrialResult(records={"rag": rec, "chat": rec}, score=score)  # type: ignore[dict-item]


def _night(results: list[GroupTrialResult]) -> tuple[Any, list[str]]:
    said: list[str] = []
    n: Any = _GroupNight.__new__(_GroupNight)
    it = iter(results)
    n.runs = lambda label, split, values, base: next(it)
    n.label, n.number, n.stop, n.inc_values, n.inc_failed = "deployed group", 3, "", [], ""
    n.options = SimpleNamespace(min_improvement=0.03)
    n.setup = SimpleNamespace(models=[SimpleNamespace(name="rag"), SimpleNamespace(name="chat")])
    n.say = said.append
    return n, said


BASE = GroupScore(value=1.0, ratios={"rag": 1.0, "chat": 1.0}, reasons=())
WORSE = GroupScore(
    value=None,
    ratios={"rag": 0.9, "chat": 1.2},
    reasons=("chat p90 TTFT 1.20x its baseline, beyond the 3% noise floor",),
    worse=("chat",),
)
INC = SimpleNamespace(user_attrs={"split": {"rag": 0.5, "chat": 0.5}}, params={})


def test_one_model_worse_in_every_round_is_a_regression_by_its_ratio_not_no_longer_runs() -> None:
    night, _ = _night([_result(BASE), _result(WORSE), _result(BASE), _result(WORSE)])
    for r in range(2):
        night._round(r, SimpleNamespace(user_attrs={"split": {"rag": 0.5, "chat": 0.5}}), INC)
    assert night.inc_values == [1.2, 1.2] and night.inc_failed == ""
    regressed, why = night.verdict()
    assert regressed and "no longer runs" not in why and "1.200" in why and "every round" in why


def test_one_worse_round_is_no_regression_and_says_why() -> None:
    night, said = _night([_result(BASE), _result(WORSE)])
    night._round(0, SimpleNamespace(user_attrs={"split": {"rag": 0.5, "chat": 0.5}}), INC)
    assert night.verdict() == (False, "")
    assert any("one round measures no noise" in line for line in said)


def test_a_group_whose_engine_failed_still_no_longer_runs() -> None:
    failed = GroupTrialResult(
        records={}, score=GroupScore(value=None, ratios={}, reasons=("rag failed",), broken=("rag failed",)),
        failed_model="rag", reason="rag: engine failed",
    )  # fmt: skip
    night, _ = _night([_result(BASE), failed, _result(BASE), failed])
    for r in range(2):
        night._round(r, SimpleNamespace(user_attrs={"split": {"rag": 0.5, "chat": 0.5}}), INC)
    regressed, why = night.verdict()
    assert regressed and why.startswith("no longer runs (rag: engine failed")
