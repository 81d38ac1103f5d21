"""A capacity study's export says the capacity at its SLOs with the brackets (issue 45): after a
confirmation, the median of its runs with their range, the baseline's beside it and the ratio;
without one, each trial's own bracket [held-broke]. The baseline is named as it ran."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.export import export_best
from autotune.study import TrialRecord, TrialStatus
from autotune.study._record import Figures


def _add(study: optuna.Study, held: float, broke: float | None, *, baseline: bool = False) -> None:
    raw: dict[str, Any] = {
        "completed": 48, "failed": 0, "output_throughput": 100.0, "capacity": held, "capacity_hi": broke,
        "capacity_slos": {"ttft_p90": 800.0}, "capacity_levels": [],
    }  # fmt: skip
    rec = TrialRecord(
        status=TrialStatus.OK,
        command=("vllm", "serve", "/m", "--max-model-len", "2048", "--port", "8000"),
        figures=Figures(raw),
        baseline=baseline,
        constraints=(-1.0,),
    )
    study.add_trial(
        optuna.trial.create_trial(value=held, params={}, distributions={}, user_attrs=rec.to_attrs())
    )


def _study() -> optuna.Study:
    st = optuna.create_study(direction="maximize", study_name="cap")
    st.set_user_attr("objective", "capacity")
    st.set_user_attr("study_spec", {"baseline_args": ["--kv-cache-memory-bytes=20M"]})
    _add(st, 7.9, 8.7, baseline=True)
    _add(st, 14.2, 15.6)
    return st


def test_without_a_confirmation_the_header_gives_each_trials_bracket() -> None:
    _, exported = export_best(_study(), out=None)
    assert (
        "# capacity at SLO ttft_p90<=800ms: 14.2 req/s [14.2-15.6] (baseline 7.9 req/s [7.9-8.7], 1.80x)"
        in exported.header
    )
    assert (
        "# baseline (vLLM defaults with --kv-cache-memory-bytes=20M; trial 0) capacity: 7.9 req/s"
        in exported.header
    )


def test_after_a_confirmation_the_header_gives_the_median_and_range_of_its_runs() -> None:
    st = _study()
    values = {"a": {"values": {"capacity": [7.4, 8.3]}}, "b": {"values": {"capacity": [13.1, 14.9]}}}
    st.set_user_attr("confirmation_1", {"trial": 1, "confirmed": True, "comparison": values})
    _, exported = export_best(st, out=None)
    assert (
        "# capacity at SLO ttft_p90<=800ms: 14 req/s [13.1-14.9] (baseline 7.85 req/s [7.4-8.3], 1.78x)"
        in exported.header
    ), exported.header
