"""What may stand between a proposed configuration and a vLLM start: each gate is an object with
one method (as Optuna's pruners are), asked in order before the launch; the first verdict wins.

- :class:`MeasuredTwin`: the same configuration was measured (or the baseline already was): its
  measurement is reused.
- :class:`PrunedTwin`: the same configuration was launched and pruned: its verdict is recorded again.
- :class:`RefusedValues`: the engine refused a value this configuration holds: not launched.
- :class:`PriorVeto`: the workload-aware prior says it is not worth launching.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from autotune.study._baseline import baseline_trial
from autotune.study._record import BASELINE_ATTR, TrialRecord, TrialStatus
from autotune.study._reuse import measured_twin, pruned_twin, refused_by

__all__ = [
    "Gate",
    "GateVerdict",
    "MeasuredTwin",
    "PriorVeto",
    "PrunedTwin",
    "RefusedValues",
    "is_baseline",
    "standard_gates",
]

log = logging.getLogger(__name__)

Veto = Callable[[optuna.Study, Mapping[str, Any]], str | None]


def is_baseline(trial: optuna.Trial) -> bool:
    return bool(trial.user_attrs.get(BASELINE_ATTR))


@dataclass(frozen=True)
class GateVerdict:
    """Why a configuration is not launched: ``reuse`` (a measured twin's figures stand), ``pruned``
    (a pruned twin's verdict stands) or ``record`` (this outcome is recorded without a launch)."""

    reuse: optuna.trial.FrozenTrial | None = None
    pruned: optuna.trial.FrozenTrial | None = None
    record: TrialRecord | None = None


class Gate(Protocol):
    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        """A verdict when the configuration ``params`` of ``trial`` is not to be launched."""
        ...


@dataclass(frozen=True)
class MeasuredTwin:
    """A baseline when the study has a measured one; with ``duplicates``, any earlier measurement
    of the same values (samplers re-propose configurations; a vLLM start is too dear for a repeat)."""

    duplicates: bool = True
    scope: Mapping[str, Any] | None = None  # only twins whose attributes hold these values

    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        if is_baseline(trial):
            twin = baseline_trial(trial.study)
        elif self.duplicates:
            twin = measured_twin(trial.study, trial.number, params, self.scope)
        else:
            twin = None
        if twin is None:
            return None
        log.info(
            "trial %d: same configuration as trial %d, its measurement is reused", trial.number, twin.number
        )
        return GateVerdict(reuse=twin)


@dataclass(frozen=True)
class PrunedTwin:
    """An earlier launch of the same values that the pruner stopped (never for the baseline)."""

    scope: Mapping[str, Any] | None = None  # only twins whose attributes hold these values

    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        twin = None if is_baseline(trial) else pruned_twin(trial.study, trial.number, params, self.scope)
        if twin is None:
            return None
        log.info(
            "trial %d: same configuration as trial %d, which was pruned: not launched",
            trial.number,
            twin.number,
        )
        return GateVerdict(pruned=twin)


@dataclass(frozen=True)
class RefusedValues:
    """A value the engine refused in an earlier trial (never for the baseline)."""

    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        refused = None if is_baseline(trial) else refused_by(trial.study, params)
        if refused is None:
            return None
        number, values = refused
        log.info(
            "trial %d: %s was refused by the engine in trial %d: not launched", trial.number, values, number
        )
        reason = f"{values} was refused by the engine in trial {number}: not launched again"
        return GateVerdict(
            record=TrialRecord(status=TrialStatus.INFEASIBLE, failure="bad_flag", reason=reason)
        )


@dataclass(frozen=True)
class PriorVeto:
    """The prior's reason not to launch a configuration (never for the baseline)."""

    veto: Veto

    def check(self, trial: optuna.Trial, params: Mapping[str, Any]) -> GateVerdict | None:
        why = None if is_baseline(trial) else self.veto(trial.study, params)
        if why is None:
            return None
        log.info("trial %d: not launched: %s", trial.number, why)
        return GateVerdict(record=TrialRecord(status=TrialStatus.INFEASIBLE, failure="prior", reason=why))


def standard_gates(
    *, reuse_duplicates: bool = True, veto: Veto | None = None, scope: Mapping[str, Any] | None = None
) -> Sequence[Gate]:
    """The gates of every study, in the order they are asked. ``reuse_duplicates=False`` (a night
    whose workload or engine changed) measures again what earlier trials measured, except twins
    within ``scope`` (that night's own trials: the series on the CPU build launched one config 4 times)."""
    if scope:
        reuse_duplicates = True
    gates: list[Gate] = [MeasuredTwin(duplicates=reuse_duplicates, scope=scope)]
    if reuse_duplicates:
        gates.append(PrunedTwin(scope=scope))
    gates.append(RefusedValues())
    if veto is not None:
        gates.append(PriorVeto(veto))
    return tuple(gates)
