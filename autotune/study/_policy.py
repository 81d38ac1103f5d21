"""How every trial of one run of a study is run: one frozen :class:`TrialPolicy`, built once by
the caller (``TuningSetup.policy``) and handed to :func:`autotune.study.run_study`.

The policy holds the gates asked before a launch (reuse, refused values, the prior's veto), the
pruner, the prior's prediction stored beside each measurement, the baseline's re-check, the
journal, the attributes stored on every trial, and the overlap setting. A new gate is one more
entry in ``gates``: the runner and its callers do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.space import SearchSpace
from autotune.study._gates import Gate, standard_gates
from autotune.study._journal import PendingJournal
from autotune.study._measure import TrialMeasure
from autotune.study._objective import Objective
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import Evaluator
from autotune.study._recorded_choices import with_recorded_choices

__all__ = ["TrialPolicy"]


@dataclass(frozen=True)
class TrialPolicy:
    """``gates``: asked in order before a launch, a verdict stands in for it; ``pruner``: stops a
    trial worse than the incumbent beyond the noise; ``predict``: the prior's expectation, stored
    beside the measurement; ``recheck_baseline``: asked when vLLM's defaults are about to run, a
    runnable reference when they no longer fit; ``journal``: keeps a measurement until the storage
    has it; ``before_replay``: called (it may block) once a trial's engine is up; ``trial_attrs``:
    stored on every trial run now (a night's number); ``baseline_elsewhere``: another live worker
    may be measuring the baseline; ``overlap``: start the next engine while one replays;
    ``after_trial``: told of every finished trial, before the caller hears of it (the latency model
    refits and enqueues its picks)."""

    space: SearchSpace
    objective: Objective
    gates: Sequence[Gate] = field(default_factory=standard_gates)
    pruner: IncumbentPruner | None = None
    predict: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    recheck_baseline: Callable[[], Mapping[str, Any] | None] | None = None
    journal: PendingJournal | None = None
    before_replay: Callable[[], None] | None = None
    trial_attrs: Mapping[str, Any] = field(default_factory=dict)
    baseline_elsewhere: bool = False
    overlap: bool = False
    after_trial: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None

    def measure(self, study: optuna.Study, evaluator: Evaluator) -> TrialMeasure:
        """How each trial of ``study`` is measured by ``evaluator`` under this policy (the space as
        the study recorded its choices)."""
        return TrialMeasure(
            space=with_recorded_choices(study, self.space),
            evaluator=evaluator,
            objective=self.objective,
            gates=tuple(self.gates),
            pruner=self.pruner,
            predict=self.predict,
            journal=self.journal,
            before_replay=self.before_replay,
            recheck_baseline=self.recheck_baseline,
        )
