"""Early stopping: a trial whose running objective is worse than the incumbent's at the same point
of the same replay, by more than the noise measured in this study, stops there.

Trials report their objective at checkpoints of each pass (a quarter of the workload's requests,
half, ...), so a checkpoint means the same requests for every trial: the comparison is like with
like (early requests of a prefix-heavy replay have no cache hits for anyone). Passes on one engine
differ by more than good configurations do (measured on the CPU build: the first pass after a start
is often the slowest), so the trial's median over its passes at a checkpoint is held against the
incumbent's worst pass at the same checkpoint. The margin is the larger
of a floor and ``k`` times the pooled relative spread of the objective over the repeated passes
that trials have recorded; inside the first pass it widens by ``sqrt(checkpoints / q)`` since a
quarter of the requests makes a noisier percentile. The baseline is never pruned, nor anything
before half of the first pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.study._best import best_feasible, in_scope
from autotune.study._record import BASELINE_ATTR, read_record

__all__ = ["IncumbentPruner"]


@dataclass
class IncumbentPruner(optuna.pruners.BasePruner):
    """An Optuna pruner; :meth:`reason` says why (or None), :meth:`prune` is its yes/no. The study
    asks :meth:`reason` at each checkpoint (the trial's listener), so the why needs no side channel."""

    metric: str = "ttft_p90"
    checkpoints: int = 4
    floor: float = 0.25  # never prune within 25% of the incumbent
    k: float = 3.0  # ... nor within k x the measured pass-to-pass relative spread
    min_step: int = 2  # not before half of the first pass
    # only trials whose attributes hold these values are incumbents and noise samples (a night after
    # the workload or the fixed flags changed: its own trials, not figures of what was measured before)
    scope: dict[str, Any] | None = None

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return self.reason(study, trial) is not None

    def reason(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str | None:
        if self.metric == "capacity":
            return self._capacity_reason(study, trial)
        step = trial.last_step
        if step is None or step < self.min_step or trial.user_attrs.get(BASELINE_ATTR):
            return None
        incumbent = self._incumbent(study)
        if incumbent is None:
            return None
        minimize = study.direction == optuna.study.StudyDirection.MINIMIZE
        value = self._median_so_far(trial.intermediate_values, step)
        ref = self._worst_pass(study, incumbent, step, minimize)
        if value is None or ref is None or math.isnan(value) or math.isnan(ref) or ref <= 0:
            return None
        margin = self.margin(study, step)
        worse = value > ref * (1 + margin) if minimize else value < ref / (1 + margin)
        if not worse:
            return None
        return (
            f"{self.metric} {value:.4g} at {self._where(step)} (median of its passes so far) is {value / ref:.2f}x "
            f"trial {incumbent.number}'s worst pass at the same point ({ref:.4g}), beyond the {margin:.0%} noise margin"
        )

    def _capacity_reason(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str | None:
        """A capacity trial reports the upper end of its bracket (the lowest load that broke) after
        each level: once that is below the best trial's capacity beyond the noise floor, no later
        level can make it the best."""
        if trial.user_attrs.get(BASELINE_ATTR) or not trial.intermediate_values:
            return None
        incumbent = self._incumbent(study)
        if incumbent is None or incumbent.value is None or incumbent.value <= 0:
            return None
        upper = min(v for v in trial.intermediate_values.values() if not math.isnan(v))
        if upper * (1 + self.floor) >= incumbent.value:
            return None
        return (
            f"capacity below {upper:.3g} req/s (a level there broke its SLO) is {upper / incumbent.value:.2f}x "
            f"trial {incumbent.number}'s {incumbent.value:.3g} req/s, beyond the {self.floor:.0%} noise margin"
        )

    def _same_point(self, step: int) -> int:
        """The checkpoint within a pass (1..checkpoints) of ``step``."""
        return (step - 1) % self.checkpoints + 1

    def _median_so_far(self, values: dict[int, float], step: int) -> float | None:
        """The trial's running figure at ``step``: the median over its passes at the same checkpoint."""
        q = self._same_point(step)
        got = sorted(
            v for s, v in values.items() if s <= step and self._same_point(s) == q and not math.isnan(v)
        )
        if not got:
            return None
        mid = len(got) // 2
        return got[mid] if len(got) % 2 else (got[mid - 1] + got[mid]) / 2

    def _worst_pass(
        self, study: optuna.Study, incumbent: optuna.trial.FrozenTrial, step: int, minimize: bool
    ) -> float | None:
        """The incumbent's worst pass at the same checkpoint: passes of one engine differ by more than
        configurations close to the best do (the first pass after a start is often the slowest)."""
        values = self._intermediates(study, incumbent)
        q = self._same_point(step)
        same = [v for s, v in values.items() if self._same_point(s) == q and not math.isnan(v)]
        if not same:
            return None
        return max(same) if minimize else min(same)

    def margin(self, study: optuna.Study, step: int) -> float:
        noise = self.noise(study)
        base = max(self.floor, self.k * noise) if noise is not None else self.floor
        q = step % self.checkpoints or self.checkpoints
        first_pass = step <= self.checkpoints
        return base * math.sqrt(self.checkpoints / q) if first_pass else base

    def noise(self, study: optuna.Study) -> float | None:
        """Pooled relative standard deviation of the objective over the passes of measured trials
        (a reused measurement is its original's passes again, and is not counted twice)."""
        squares: list[float] = []
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if not t.user_attrs.get("passes") or not self._in_scope(t):
                continue
            rec = read_record(t)
            if rec.duplicate_of is not None:
                continue
            values = rec.pass_values(self.metric)
            if len(values) < 2:
                continue
            mean = sum(values) / len(values)
            if mean <= 0:
                continue
            var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
            squares.append(var / mean**2)
        return math.sqrt(sum(squares) / len(squares)) if squares else None

    def _where(self, step: int) -> str:
        p, q = divmod(step - 1, self.checkpoints)
        return f"pass {p + 1}, {q + 1}/{self.checkpoints} of its requests"

    def _incumbent(self, study: optuna.Study) -> optuna.trial.FrozenTrial | None:
        return best_feasible(study, self._in_scope if self.scope else None)

    def _in_scope(self, trial: optuna.trial.FrozenTrial) -> bool:
        return in_scope(trial, self.scope)

    @staticmethod
    def _intermediates(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> dict[int, float]:
        """The incumbent's reports (a reused measurement: its original's)."""
        if trial.intermediate_values:
            return dict(trial.intermediate_values)
        twin = read_record(trial).duplicate_of
        if twin is None:
            return {}
        return dict(study.get_trials(deepcopy=False)[twin].intermediate_values)
