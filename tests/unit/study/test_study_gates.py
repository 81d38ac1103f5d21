"""The runner's gates are one protocol: a gate of one method stands between a proposed
configuration and a launch, and its verdict is recorded as the trial's outcome."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from autotune.study import (
    GateVerdict,
    Objective,
    StudyRunner,
    TrialHooks,
    TrialMeasure,
    TrialRecord,
    TrialStatus,
    load_or_create,
    read_record,
    standard_gates,
)
from tests.unit.study.test_study_resume import SPACE, Evaluator

optuna.logging.set_verbosity(optuna.logging.WARNING)


class NoBigBlocks:
    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        if params.get("block_size") != 64:
            return None
        return GateVerdict(
            record=TrialRecord(status=TrialStatus.INFEASIBLE, failure="policy", reason="no 64")
        )


def test_a_gate_of_one_method_keeps_a_configuration_from_launching(tmp_path: Path) -> None:
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)
    for size in (64, 32):
        study.enqueue_trial({"block_size": size})
    ev = Evaluator()
    done: list[int] = []
    measure = TrialMeasure(
        space=SPACE, evaluator=ev, objective=Objective(), gates=(*standard_gates(), NoBigBlocks())
    )
    StudyRunner(study, measure, TrialHooks(on_done=lambda rep: done.append(rep.number))).run(n_trials=3)
    assert ev.calls == [(), ("--block-size", "32")]  # the baseline and 32 launched; 64 never
    gated = read_record(study.get_trials()[1])
    assert gated.status is TrialStatus.INFEASIBLE and gated.reason == "no 64" and not gated.ok
    assert done == [0, 1, 2]
