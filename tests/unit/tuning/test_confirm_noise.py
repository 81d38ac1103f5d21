"""The noise a re-measurement is held against: the floor (``min_improvement``), or the spread of its
own A B A B runs where that is larger, as engines sharing a GPU move each other's figures (on the
H200 the equal split varied 2x run to run, against one engine's 3%)."""

from __future__ import annotations

import optuna
import pytest

from autotune.study import TrialRecord, TrialStatus
from autotune.study._record import Figures
from autotune.trial import ArmSummary, Comparison
from autotune.tuning._confirm import judge_gain, on_shared_gpu, run_noise


def _arm(name: str, values: list[float]) -> ArmSummary:
    runs = tuple(
        TrialRecord(
            status=TrialStatus.OK, figures=Figures({"completed": 8, "percentiles_ms": {"ttft_p90": v}})
        )
        for v in values
    )
    return ArmSummary(name, (), runs, {"ttft_p90": values})


def test_the_noise_is_the_larger_of_the_floor_and_either_arms_spread() -> None:
    wide = run_noise([100.0, 130.0], [60.0, 62.0], 0.03)  # the baseline's runs 30 apart on a median of 115
    assert wide.value == pytest.approx(30 / 115) and wide.measured and wide.text() == "26% spread"
    tight = run_noise([100.0, 101.0], [60.0, 60.5], 0.03)
    assert tight.value == 0.03 and not tight.measured and tight.text() == "3% floor"
    one = run_noise([100.0], [60.0], 0.03)  # one round: no spread measured, the floor
    assert one.value == 0.03 and one.spread is None


def test_a_gain_inside_the_measured_spread_is_not_confirmed_though_it_beats_the_floor() -> None:
    # 12% better on the medians, ranges apart, but the baseline's own runs spread 20%
    comp = Comparison(a=_arm("baseline", [100.0, 122.0]), b=_arm("best", [96.0, 98.0]))
    floor_only = judge_gain(comp, "ttft_p90", maximize=False, noise=0.03, capacity=False)
    assert floor_only.ok, floor_only.why
    noise = run_noise(comp.a.figures["ttft_p90"], comp.b.figures["ttft_p90"], 0.03)
    held = judge_gain(comp, "ttft_p90", maximize=False, noise=noise.value, capacity=False)
    assert not held.ok and "within the 20% noise floor" in held.why, held.why


def test_a_study_whose_worker_found_another_tenant_on_its_gpu_is_on_a_shared_gpu() -> None:
    study = optuna.create_study()
    assert not on_shared_gpu(study)
    study.set_user_attr("worker:h:0", {"gpus": [0], "names": ["H100"], "cpus": []})
    assert not on_shared_gpu(study)
    study.set_user_attr(
        "worker:h:1", {"gpus": [1], "note": "GPU 1 on h had memory in use before this worker"}
    )
    assert on_shared_gpu(study)
