"""The split of a shared budget between the models of a group, as a search dimension of its own.

Each model's fraction of the budget comes from stick-breaking: the first model takes ``u1`` of the
whole, the next ``u2`` of what is left, and so on; the last takes the rest. So every sample is a
split whose fractions sum to 1 (nothing is rejected), with one parameter fewer than models, and a
split chosen elsewhere (the prior's, the operator's) maps back to exactly one point
(:func:`split_params`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import optuna

from autotune.space import SearchSpace
from autotune.study._measure import suggest_values

__all__ = [
    "SPLIT_HIGH",
    "SPLIT_LOW",
    "SPLIT_PREFIX",
    "member_params",
    "split_fractions",
    "split_params",
    "suggest_member",
    "suggest_split",
]

SPLIT_PREFIX = "split."
SPLIT_LOW, SPLIT_HIGH = 0.02, 0.98  # no model is sampled to nothing (nor to all)


def _param(name: str) -> str:
    return f"{SPLIT_PREFIX}{name}"


def suggest_split(trial: optuna.Trial, names: Sequence[str]) -> dict[str, float]:
    """Each model's fraction of the budget (summing to 1), asked of ``trial`` (``split.NAME``)."""
    params = {_param(n): trial.suggest_float(_param(n), SPLIT_LOW, SPLIT_HIGH) for n in names[:-1]}
    return split_fractions(params, names)


def split_fractions(params: Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """The fractions of a trial's ``split.NAME`` parameters (the last model takes the rest)."""
    left, out = 1.0, {}
    for n in names[:-1]:
        out[n] = left * float(params[_param(n)])
        left -= out[n]
    out[names[-1]] = left
    return out


def split_params(fractions: Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """The ``split.NAME`` parameters of a split (fractions normalised to sum to 1, clipped into range)."""
    total = sum(max(float(fractions[n]), 0.0) for n in names) or 1.0
    left, out = 1.0, {}
    for n in names[:-1]:
        share = max(float(fractions[n]), 0.0) / total
        u = min(max(share / left if left > 0 else SPLIT_HIGH, SPLIT_LOW), SPLIT_HIGH)
        out[_param(n)] = u
        left -= left * u
    return out


class _Prefixed:
    """A trial whose parameters are one model's: ``NAME.param`` in the study, ``param`` to its space."""

    def __init__(self, trial: optuna.Trial, prefix: str) -> None:
        self._trial, self._prefix = trial, prefix

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._trial.suggest_categorical(f"{self._prefix}.{name}", list(choices))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return self._trial.suggest_int(f"{self._prefix}.{name}", low, high, step=step, log=log)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return self._trial.suggest_float(f"{self._prefix}.{name}", low, high, step=step, log=log)


def suggest_member(trial: optuna.Trial, name: str, space: SearchSpace) -> dict[str, Any]:
    """One model's configuration of its own space, asked of ``trial`` as ``NAME.param``."""
    return suggest_values(cast(optuna.Trial, _Prefixed(trial, name)), space)


def member_params(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    """One model's values among a group trial's parameters (``NAME.param`` -> ``param``)."""
    return {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"{name}.")}
