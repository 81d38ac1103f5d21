"""One trial, from its values to its recorded outcome: the values (the sampler's, or the baseline's),
the gates (a verdict stands in for a launch), the evaluator, then the record, the constraints the
sampler learns from, and the objective value. Raises :class:`optuna.TrialPruned` for a pruned trial."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.space import EngineConfig, Parameter, SearchSpace, describe_values
from autotune.study._baseline import REFERENCE_ATTR, baseline_throughput, ensure_baseline
from autotune.study._gates import Gate, GateVerdict, is_baseline
from autotune.study._journal import PendingJournal
from autotune.study._objective import Objective
from autotune.study._pruner import IncumbentPruner
from autotune.study._record import (
    Evaluator,
    Figures,
    TrialRecord,
    TrialStatus,
    store_constraints,
    write_record,
)
from autotune.study._reuse import reuse_measurement, reuse_pruned

__all__ = ["TrialMeasure", "suggest_values"]

log = logging.getLogger(__name__)


def suggest_values(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Ask the trial for each tunable parameter whose condition holds (in declaration order)."""
    values: dict[str, Any] = {}
    for name, p in space.tunable.items():
        if p.condition is not None and not p.condition.holds(values.get(p.condition.param)):
            continue
        values[name] = _suggest(trial, name, p)
    return values


def _suggest(trial: optuna.Trial, name: str, p: Parameter) -> Any:
    if p.type == "bool":
        return trial.suggest_categorical(name, [True, False])
    if p.type == "categorical":
        assert p.choices is not None
        return trial.suggest_categorical(name, list(p.choices))
    assert p.low is not None and p.high is not None
    if p.type == "int":
        step = int(p.step) if p.step else 1
        return trial.suggest_int(name, int(p.low), int(p.high), step=step, log=p.log)
    return trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)


@dataclass(frozen=True)
class TrialMeasure:
    """How a trial is measured and recorded. ``pruner``: stops a trial early when its running
    objective is worse than the incumbent's beyond the noise (never the baseline); ``predict``:
    what the prior expects of a configuration, stored next to what was measured; ``journal``:
    keeps a measurement locally until the storage has it; ``before_replay``: called (it may block)
    once a trial's engine is up, before it replays (not for the baseline)."""

    space: SearchSpace
    evaluator: Evaluator
    objective: Objective
    gates: Sequence[Gate] = ()
    pruner: IncumbentPruner | None = None
    predict: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    journal: PendingJournal | None = None
    before_replay: Callable[[], None] | None = None
    # asked when vLLM's defaults are about to be measured as the baseline: a runnable reference when
    # they no longer fit (the machine changed since the plan: another tenant's memory), else None
    recheck_baseline: Callable[[], Mapping[str, Any] | None] | None = None
    # called once a trial's engine is up, before its replay, with the trial (the baseline too): the
    # runner starts the next trial's engine then (overlapped starts)
    on_engine_up: Callable[[optuna.Trial], None] | None = None

    def begin(self, study: optuna.Study, *, running_counts: bool) -> None:
        """The baseline enqueued unless the study has a measured one or one waiting."""
        ensure_baseline(study, running_counts=running_counts)

    def before_ask(self, study: optuna.Study) -> None:
        """Nothing: the sampler (or the waiting baseline) picks the next trial."""

    def launch_config(self, trial: optuna.Trial, values: Mapping[str, Any]) -> EngineConfig | None:
        """What ``trial`` would launch with ``values``; None when a gate's verdict stands instead."""
        if self._verdict(trial, values, quiet=True) is not None:
            return None
        return EngineConfig.chosen(self.space, values)

    def values(self, trial: optuna.Trial) -> dict[str, Any]:
        """The baseline's reference (none: vLLM's defaults), or what the sampler proposes."""
        if is_baseline(trial):
            reference = trial.study.user_attrs.get(REFERENCE_ATTR)
            if not reference and self.recheck_baseline is not None:
                reference = self.recheck_baseline()
                if reference:  # recorded on the study: every later run and worker measures the same
                    trial.study.set_user_attr(REFERENCE_ATTR, dict(reference))
                    log.warning(
                        "trial %d: vLLM's defaults no longer fit here: the baseline is %s",
                        trial.number,
                        reference,
                    )
            return dict(reference or {})
        return suggest_values(trial, self.space)

    def __call__(self, trial: optuna.Trial, values: Mapping[str, Any]) -> float | None:
        config = EngineConfig.chosen(self.space, values)
        verdict = self._verdict(trial, values)
        if verdict is not None and verdict.reuse is not None:
            return reuse_measurement(trial, verdict.reuse, is_baseline(trial))
        if verdict is not None and verdict.pruned is not None:
            reuse_pruned(trial, verdict.pruned)
        if verdict is not None and verdict.record is not None:
            record = verdict.record
        else:
            record = self.evaluator(trial.number, config, self._listener(trial))
        if self.predict is not None:
            record = record.with_(predicted=dict(self.predict(values)))
        if record.status is TrialStatus.PRUNED:
            log.info("trial %d pruned: %s", trial.number, record.reason)
            rendered = self.evaluator.render(config)
            write_record(
                trial, record.with_(rendered_args=tuple(rendered.args), rendered_env=dict(rendered.env))
            )
            raise optuna.TrialPruned(record.reason)
        return self._record(trial, values, config, record)

    def _verdict(
        self, trial: optuna.Trial, values: Mapping[str, Any], *, quiet: bool = False
    ) -> GateVerdict | None:
        gate_log = logging.getLogger("autotune.study._gates")
        level = gate_log.level
        if quiet:  # a look ahead: the verdict is logged when the trial runs
            gate_log.setLevel(logging.WARNING)
        try:
            for gate in self.gates:
                verdict = gate.check(trial, values)
                if verdict is not None:
                    return verdict
            return None
        finally:
            gate_log.setLevel(level)

    def _listener(self, trial: optuna.Trial) -> _Listener:
        return _Listener(
            trial,
            is_baseline(trial),
            self.objective.metric,
            self.pruner,
            self.before_replay,
            self.on_engine_up,
        )

    def _record(
        self, trial: optuna.Trial, values: Mapping[str, Any], config: EngineConfig, record: TrialRecord
    ) -> float | None:
        """Store the outcome with its constraints (the sampler learns the infeasible region from
        them); the objective value (None when nothing was measured)."""
        baseline, objective = is_baseline(trial), self.objective
        constraints = objective.constraints(
            record.figures.as_dict() if record.figures else None,
            None if baseline else baseline_throughput(trial.study),
            feasible=record.ok,
            memory_violations=len(record.violations),
        )
        names = objective.constraint_names()
        rendered = self.evaluator.render(config)  # the engine's words, kept for re-runs and the report
        record = record.with_(
            rendered_args=tuple(rendered.args),
            rendered_env=dict(rendered.env),
            baseline=baseline,
            reference=describe_values(self.space, values) if baseline and values else None,
            constraints=tuple(constraints),
            constraint_names=tuple(names),
        )
        value: float | None = None  # nothing measured: the runner tells the trial PRUNED, no sentinel
        measured = record.figures.get(objective.metric) if record.figures is not None else None
        if measured is not None and not math.isnan(measured):
            value = measured
        if self.journal is not None:  # kept locally until the storage has it (a full disk loses nothing)
            attrs = {**trial.user_attrs, **record.to_attrs()}
            self.journal.save(trial, value, attrs, dict(zip(names, constraints, strict=True)))
        write_record(trial, record)
        store_constraints(trial, names, constraints)
        return value


@dataclass(frozen=True)
class _Listener:
    """A trial's listener (:class:`~autotune.study.TrialListener`): at engine-up it lets the runner
    start the next engine (overlapped starts) and waits at ``before_replay`` (never the baseline); at a
    checkpoint it reports the objective to Optuna and asks the pruner why to stop (never the baseline)."""

    trial: optuna.Trial
    baseline: bool
    metric: str
    pruner: IncumbentPruner | None
    before_replay: Callable[[], None] | None
    on_engine_up: Callable[[optuna.Trial], None] | None

    def engine_up(self) -> None:
        if self.on_engine_up is not None:
            self.on_engine_up(self.trial)
        if self.before_replay is not None and not self.baseline:
            self.before_replay()

    def level(self, multiplier: float, held: bool, broke: str) -> tuple[bool, str]:
        return held, broke  # one engine: its own verdict

    def checkpoint(self, step: int, figures: Mapping[str, Any]) -> str | None:
        value = Figures(dict(figures)).get(self.metric)
        if value is None:
            return None
        self.trial.report(value, step)
        if self.baseline or self.pruner is None:
            return None
        study = self.trial.study
        return self.pruner.reason(study, study._storage.get_trial(self.trial._trial_id))
