"""What the study already knows of a configuration, so that no vLLM start is spent learning it
again: an earlier measurement of the same values (reused), an earlier launch the pruner stopped
(its verdict recorded again), or a value the engine refused before (not launched)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import optuna

from autotune.study._best import completed_trials, in_scope
from autotune.study._record import BASELINE_ATTR, read_record, store_constraints, write_record

__all__ = ["measured_twin", "pruned_twin", "refused_by", "reuse_measurement", "reuse_pruned"]

_State = optuna.trial.TrialState


def _twin(
    study: optuna.Study,
    number: int,
    values: Mapping[str, Any],
    state: _State | None,
    keep: Callable[[optuna.trial.FrozenTrial], bool] = lambda t: True,
) -> optuna.trial.FrozenTrial | None:
    """The first other trial in ``state`` (None: with an outcome, :func:`completed_trials`) with these
    values (never a baseline) that ``keep`` accepts."""
    found = completed_trials(study) if state is None else study.get_trials(deepcopy=False, states=(state,))
    for t in found:
        if (
            t.number != number
            and t.params == dict(values)
            and not t.user_attrs.get(BASELINE_ATTR)
            and keep(t)
        ):
            return t
    return None


def _in(scope: Mapping[str, Any] | None) -> Callable[[optuna.trial.FrozenTrial], bool]:
    return lambda t: in_scope(t, scope)


def measured_twin(
    study: optuna.Study, number: int, values: Mapping[str, Any], scope: Mapping[str, Any] | None = None
) -> optuna.trial.FrozenTrial | None:
    """An earlier finished trial of this configuration (whose attributes hold ``scope``), measured or
    not: samplers re-propose configurations, and a vLLM start is too dear to spend on a repeat."""
    return _twin(study, number, values, None, _in(scope))


def _launched_and_pruned(t: optuna.trial.FrozenTrial) -> bool:
    rec = read_record(t)
    return rec.failure == "pruned" and rec.duplicate_of is None


def pruned_twin(
    study: optuna.Study, number: int, values: Mapping[str, Any], scope: Mapping[str, Any] | None = None
) -> optuna.trial.FrozenTrial | None:
    """An earlier launch of this configuration that the pruner stopped (worse than the incumbent
    beyond the measured noise): relaunching it is a vLLM start spent on a known loser (on the H200,
    5 of 19 launches in two studies, 22% of their GPU time, and none of the five did better)."""
    inside = _in(scope)
    return _twin(study, number, values, _State.PRUNED, lambda t: _launched_and_pruned(t) and inside(t))


def reuse_measurement(trial: optuna.Trial, twin: optuna.trial.FrozenTrial, is_baseline: bool) -> float | None:
    """Record the twin's outcome (and constraints) as this trial's; its objective value (None: the
    twin ended without a measurement, and so does this trial)."""
    rec = read_record(twin)
    write_record(trial, rec.with_(baseline=is_baseline, duplicate_of=twin.number))
    store_constraints(trial, rec.constraint_names, rec.constraints)
    return twin.value


def reuse_pruned(trial: optuna.Trial, twin: optuna.trial.FrozenTrial) -> NoReturn:
    """Record the earlier launch's verdict (with its reports, which TPE ranks pruned trials by)."""
    rec = read_record(twin)
    for step, value in sorted(twin.intermediate_values.items()):
        trial.report(value, step)
    write_record(trial, rec.with_(duplicate_of=twin.number))
    raise optuna.TrialPruned(f"same configuration as trial {twin.number}, pruned there: {rec.reason}")


def refused_by(study: optuna.Study, values: Mapping[str, Any]) -> tuple[int, str] | None:
    """(trial, values) when the engine refused a configuration for a value this one shares.

    A trial that failed with ``bad_flag`` (the engine's parser or its start-up refused a value)
    names as culprits its parameter values that no measured trial ever had; a configuration
    holding all of them is refused too, without a launch (block size 7 on the CPU build)."""
    measured: set[tuple[str, str]] = set()
    refused: list[tuple[int, set[tuple[str, str]]]] = []
    for t in completed_trials(study):
        rec = read_record(t)
        pairs = {(k, repr(v)) for k, v in t.params.items()}
        if rec.ok:
            measured |= pairs
        elif rec.failure == "bad_flag" and rec.duplicate_of is None:
            refused.append((t.number, pairs))
    mine = {(k, repr(v)) for k, v in values.items()}
    for number, pairs in refused:
        culprits = pairs - measured
        if culprits and culprits <= mine:
            return number, ", ".join(f"{k}={v}" for k, v in sorted(culprits))
    return None
