"""One Poisson/gamma process for the whole tool: the synthetic timestamps and the replayer's --rate."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.bench import ArrivalSpec, plan_offsets
from autotune.workload import arrival_offsets, synth_chat, synth_prefix_repeat, synth_rag


def test_the_replayer_plans_the_same_arrivals_as_before_for_the_same_seed() -> None:
    # Pinned from the replayer's own implementation before arrivals had one home (issue 10):
    # a study resumed with the same --rate and seed must see the same schedule.
    poisson = plan_offsets([None] * 4, ArrivalSpec(mode="poisson", rate=5.0, seed=7))
    gamma = plan_offsets([None] * 4, ArrivalSpec(mode="gamma", rate=10.0, burstiness=0.25, seed=3))
    assert poisson is not None and gamma is not None
    np.testing.assert_allclose(poisson, [0.0, 0.20504066965898102, 0.31875040113563136, 0.4977723738546639])
    np.testing.assert_allclose(gamma, [0.0, 0.1699732936163605, 0.17000469488312037, 0.1910709857735357])


def test_replayer_and_synthetic_workloads_draw_from_one_process() -> None:
    planned = plan_offsets([None] * 12, ArrivalSpec(mode="poisson", rate=3.0, seed=4))
    assert planned is not None
    np.testing.assert_array_equal(planned, arrival_offsets(12, 3.0, seed=4))
    rag = synth_rag(documents=3, document_tokens=5, questions_per_document=4, rate=3.0, seed=4)
    assert [r["timestamp"] for r in rag] == [round(float(t), 3) for t in planned]
    repeat = synth_prefix_repeat(prefix_tokens=5, suffixes=12, rate=3.0, seed=4)
    assert [r["timestamp"] for r in repeat] == [r["timestamp"] for r in rag]


def test_chat_sessions_start_on_the_shared_process() -> None:
    records = synth_chat(
        sessions=5, turns=2, system_tokens=3, document_tokens=3, think_time=1.0, rate=0.5, seed=2
    )
    starts = sorted(r["timestamp"] for r in records if r["id"].endswith("-t0"))
    assert starts == [round(float(t), 3) for t in arrival_offsets(5, 0.5, seed=2)]


def test_arrival_offsets_start_at_zero_never_go_back_and_keep_the_rate() -> None:
    offsets = arrival_offsets(5001, 50.0, seed=9)
    assert offsets[0] == 0.0 and (np.diff(offsets) >= 0).all()
    assert 5000 / offsets[-1] == pytest.approx(50.0, rel=0.05)
    assert len(arrival_offsets(0, 1.0)) == 0


@pytest.mark.parametrize(("n", "rate", "burstiness"), [(-1, 1.0, 1.0), (3, 0.0, 1.0), (3, 1.0, 0.0)])
def test_arrival_offsets_refuse_impossible_settings(n: int, rate: float, burstiness: float) -> None:
    with pytest.raises(ValueError, match="arrival_offsets"):
        arrival_offsets(n, rate, burstiness)
