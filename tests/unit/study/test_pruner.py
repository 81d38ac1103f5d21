"""The pruner compares like with like (the same step of the same replay) and never prunes the baseline."""

from __future__ import annotations

import optuna
import pytest

from autotune.study import BASELINE_ATTR, IncumbentPruner, TrialRecord, TrialStatus, write_record
from autotune.study._record import Figures

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study() -> optuna.Study:
    return optuna.create_study(direction="minimize")


def _complete(study: optuna.Study, final: float, steps: dict[int, float], *, passes: list[float] | None = None,
              baseline: bool = False, duplicate_of: int | None = None, attrs: dict | None = None) -> None:  # fmt: skip
    t = study.ask()
    for key, value in (attrs or {}).items():
        t.set_user_attr(key, value)
    for step, v in steps.items():
        t.report(v, step)
    rec = TrialRecord(
        status=TrialStatus.OK,
        figures=Figures({"percentiles_ms": {"ttft_p90": final}, "completed": 10}),
        baseline=baseline,
        constraints=(-1.0,),  # feasible
        passes=tuple({"ttft_p90": v} for v in passes or ()),
        duplicate_of=duplicate_of,
    )
    write_record(t, rec)
    if baseline:
        t.set_user_attr(BASELINE_ATTR, True)
    study.tell(t, final)


def _running(
    study: optuna.Study, steps: dict[int, float], *, baseline: bool = False
) -> optuna.trial.FrozenTrial:
    t = study.ask()
    if baseline:
        t.set_user_attr(BASELINE_ATTR, True)
    for step, v in steps.items():
        t.report(v, step)
    return study.get_trials(deepcopy=False)[t.number]


def test_a_trial_far_worse_than_the_incumbent_at_the_same_point_is_pruned_with_the_reason() -> None:
    study = _study()
    _complete(study, 100.0, {1: 150.0, 2: 120.0, 3: 110.0, 4: 100.0}, baseline=True)
    pruner = IncumbentPruner()
    frozen = _running(study, {1: 600.0, 2: 400.0})
    assert pruner.prune(study, frozen)
    why = pruner.reason(study, frozen)
    assert why is not None
    assert "3.33x trial 0's worst pass at the same point (120)" in why
    assert "pass 1, 2/4 of its requests" in why


def test_nothing_is_pruned_within_the_noise_nor_before_half_a_pass_nor_the_baseline() -> None:
    study = _study()
    _complete(study, 100.0, {1: 150.0, 2: 120.0, 3: 110.0, 4: 100.0})
    pruner = IncumbentPruner()
    assert not pruner.prune(study, _running(study, {1: 900.0}))  # a quarter of the requests: too early
    assert not pruner.prune(study, _running(study, {1: 150.0, 2: 160.0}))  # 1.33x < 1 + 0.25 x sqrt(2)
    assert not pruner.prune(study, _running(study, {1: 900.0, 2: 900.0}, baseline=True))


def test_the_margin_grows_with_the_noise_measured_over_passes() -> None:
    quiet, noisy = _study(), _study()
    _complete(quiet, 100.0, {4: 100.0}, passes=[99.0, 100.0, 101.0])
    _complete(noisy, 100.0, {4: 100.0}, passes=[70.0, 100.0, 130.0])
    pruner = IncumbentPruner()
    assert pruner.margin(quiet, 8) == pytest.approx(0.25)  # the floor
    assert pruner.margin(noisy, 8) == pytest.approx(0.9, rel=0.01)  # 3 x a 30% relative SD
    assert pruner.margin(quiet, 2) == pytest.approx(0.25 * 2**0.5)  # half a pass: a noisier percentile
    trial = _running(noisy, {5: 150.0, 6: 180.0, 8: 180.0})
    assert not pruner.prune(noisy, trial)  # 1.8x is within a 90% margin


def test_a_reused_measurement_does_not_count_again_in_the_noise() -> None:
    """Samplers re-propose measured configurations (111 of 128 trials in an H200 study); each reuse
    carries its original's passes, which must not outweigh the trials that were measured."""
    study = _study()
    _complete(study, 100.0, {4: 100.0}, passes=[99.0, 100.0, 101.0])
    _complete(study, 100.0, {4: 100.0}, passes=[70.0, 100.0, 130.0])
    for _ in range(5):
        _complete(study, 100.0, {}, passes=[99.0, 100.0, 101.0], duplicate_of=0)
    assert IncumbentPruner().noise(study) == pytest.approx(((0.01**2 + 0.3**2) / 2) ** 0.5)


def test_the_median_of_the_passes_is_held_against_the_incumbents_worst_pass() -> None:
    study = _study()
    # the incumbent's passes at the end of a pass: 300, 280, 450 (its first pass was fine, its third slow)
    _complete(study, 300.0, {4: 300.0, 8: 280.0, 12: 450.0})
    pruner = IncumbentPruner()
    # a slow third pass (500) of an otherwise equal trial: its median (300) is far from 450 x 1.25
    assert not pruner.prune(study, _running(study, {4: 290.0, 8: 300.0, 12: 500.0}))
    # consistently slow passes are pruned
    assert pruner.prune(study, _running(study, {4: 700.0, 8: 720.0}))


def _capacity_best(study: optuna.Study, capacity: float) -> None:
    t = study.ask()
    rec = TrialRecord(
        status=TrialStatus.OK,
        figures=Figures({"capacity": capacity, "completed": 10}),
        constraints=(-1.0,),
    )
    write_record(t, rec)
    study.tell(t, capacity)


def test_a_capacity_trial_whose_bracket_tops_out_below_the_best_capacity_is_pruned() -> None:
    """A capacity trial reports the upper end of its bracket (the lowest load that broke) after each
    level; once that is below the best capacity beyond the noise floor no later level can win."""
    study = optuna.create_study(direction="maximize")
    _capacity_best(study, 20.0)
    pruner = IncumbentPruner(metric="capacity")
    assert pruner.reason(study, _running(study, {})) is None  # no level broke yet: open above
    assert pruner.reason(study, _running(study, {2: 17.0})) is None  # within the 25% floor of 20
    frozen = _running(study, {3: 30.0, 4: 12.0})  # the lowest level that broke: 12 req/s
    why = pruner.reason(study, frozen)
    assert why is not None and "12 req/s" in why and "0.60x trial 0's 20 req/s" in why
    assert pruner.reason(study, _running(study, {1: 12.0}, baseline=True)) is None  # never the baseline
