"""A group's re-measurement verdict, on measured rounds (no engine started): each model against the
spread of its own A B A B runs, not the one-engine floor alone; a model worse beyond its noise is
named and the group not confirmed; one that moved inside its noise does not stop a one-sided gain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.study import GroupScore, TrialRecord, TrialStatus
from autotune.study._record import Figures
from autotune.studyfile import load_group_file
from autotune.tiny_model import make_tiny_model
from autotune.tuning import GroupSetup, GroupTrialResult, build_group
from autotune.tuning.group._confirm import _group_verdict
from tests.conftest import REPO


def _round(rag: float, chat: float, tput: float = 100.0) -> GroupTrialResult:
    def rec(ttft: float) -> TrialRecord:
        figures = {
            "completed": 8,
            "failed": 0,
            "output_throughput": tput,
            "percentiles_ms": {"ttft_p90": ttft},
        }
        return TrialRecord(status=TrialStatus.OK, figures=Figures(figures))

    return GroupTrialResult({"rag": rec(rag), "chat": rec(chat)}, GroupScore(1.0, {}, ()))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupSetup]:
    root = tmp_path_factory.mktemp("group-confirm")
    l2 = make_tiny_model(root / "l2", layers=2)
    path = root / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l2}, workload: {REPO / "examples" / "rag.jsonl"}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
""")
    group = load_group_file(Path(path))
    assert group is not None
    with build_group(group, {"check_args": False}) as built:
        yield built


def test_a_one_sided_gain_is_confirmed_and_a_model_worse_beyond_its_own_spread_is_named(
    setup: GroupSetup,
) -> None:
    base = [_round(200.0, 100.0), _round(204.0, 101.0)]
    one_sided = _group_verdict(setup, "pareto", base, [_round(120.0, 100.5), _round(121.0, 101.5)], 0.03)
    assert one_sided.confirmed, one_sided.why
    assert one_sided.value == pytest.approx((0.6 * 1.0) ** 0.5, abs=0.02)
    assert "gains: rag ttft_p90" in one_sided.why and "chat" not in one_sided.why.split("gains:")[1]
    assert "(rag 3% floor, chat 3% floor)" in one_sided.why  # tight runs: the floor
    paid = _group_verdict(setup, "pareto", base, [_round(120.0, 120.0), _round(121.0, 121.0)], 0.03)
    assert not paid.confirmed and "worse beyond the noise: chat p90 TTFT 1.20x its baseline" in paid.why
    # chat's own runs spread 50%: its 1.2x lies inside its noise, and rag's gain stands
    noisy = [_round(200.0, 80.0), _round(204.0, 130.0)]
    inside = _group_verdict(setup, "pareto", noisy, [_round(120.0, 100.0), _round(121.0, 150.0)], 0.03)
    assert inside.noise["chat"] == pytest.approx(50 / 105) and inside.confirmed, inside.why
    assert "chat 48% spread" in inside.why
    # a throughput that fell below the model's floor (95% of its baseline) beyond its runs' spread
    starved = [_round(120.0, 100.5, tput=80.0), _round(121.0, 101.5, tput=80.0)]
    short = _group_verdict(setup, "pareto", base, starved, 0.03)
    assert (
        not short.confirmed and "rag output throughput 0.80x its baseline, below its 95% floor" in short.why
    )
