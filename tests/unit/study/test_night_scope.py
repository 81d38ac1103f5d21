"""A night after a change (workload, fixed flags) holds candidates against its own trials only: the
pruner's incumbent and noise, and the twins whose measurement is reused. The CPU build's 4-night
series pruned every candidate of night 4 (3x the working set) against night 1's best (879.7 ms),
and launched the same configuration 4 times."""

from __future__ import annotations

import optuna

from autotune.study import IncumbentPruner, standard_gates
from autotune.study._gates import MeasuredTwin, PrunedTwin
from autotune.study._reuse import measured_twin
from tests.unit.study.test_pruner import _complete, _running, _study


def test_the_pruner_of_a_changed_night_ignores_earlier_nights_incumbent() -> None:
    study = _study()
    _complete(study, 100.0, {1: 150.0, 2: 120.0, 3: 110.0, 4: 100.0}, baseline=True, attrs={"night": 1})
    trial = _running(study, {1: 900.0, 2: 800.0})  # far worse than night 1's figures
    assert IncumbentPruner().reason(study, trial) is not None  # today's code: pruned against night 1
    assert IncumbentPruner(scope={"night": 2}).reason(study, trial) is None  # nothing of tonight yet


def test_twins_of_tonight_are_reused_and_earlier_nights_are_not() -> None:
    study = _study()
    t = study.ask({"block_size": optuna.distributions.CategoricalDistribution([16, 32])})
    t.set_user_attr("night", 1)
    study.tell(t, 1.0)
    assert measured_twin(study, 99, {"block_size": t.params["block_size"]}, {"night": 2}) is None
    assert measured_twin(study, 99, {"block_size": t.params["block_size"]}, {"night": 1}) is not None


def test_a_changed_night_still_reuses_its_own_twins() -> None:
    gates = standard_gates(reuse_duplicates=False, scope={"night": 4})
    assert MeasuredTwin(duplicates=True, scope={"night": 4}) in gates
    assert PrunedTwin(scope={"night": 4}) in gates
    assert MeasuredTwin(duplicates=False) in standard_gates(reuse_duplicates=False)
