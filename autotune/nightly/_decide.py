"""Tonight's candidates and the decision's reason: what ran, what it measured, and why the
incumbent stays or goes (no candidate ran, every one was worse, pruned, infeasible, not confirmed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.nightly._history import NIGHT_ATTR
from autotune.study import BASELINE_ATTR, constraints_hold, figure_text, read_record

__all__ = ["Candidate", "candidates_of", "no_candidate_reason", "worse_reason"]


@dataclass(frozen=True)
class Candidate:
    """One trial of tonight, as the night's report and decision see it."""

    number: int
    params: dict[str, Any]
    status: str
    value: float | None
    feasible: bool
    reused: int | None  # the trial whose measurement it reused (the same command measured before)
    baseline: bool
    args: tuple[str, ...]
    env: dict[str, str]
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "params": self.params,
            "status": self.status,
            "value": self.value,
            "feasible": self.feasible,
            "reused": self.reused,
            "baseline": self.baseline,
            "reason": self.reason,
        }


def candidates_of(study: optuna.Study, night: int) -> list[Candidate]:
    """Every finished trial tagged with ``night``, in the order they ran."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(NIGHT_ATTR) != night or not t.state.is_finished():
            continue
        rec = read_record(t)
        feasible = (
            t.state is optuna.trial.TrialState.COMPLETE
            and rec.ok
            and constraints_hold(rec.constraints or (1.0,))
        )
        out.append(
            Candidate(
                number=t.number,
                params=dict(t.params),
                status=rec.status.value,
                value=t.value if t.state is optuna.trial.TrialState.COMPLETE else None,
                feasible=feasible,
                reused=rec.duplicate_of,
                baseline=bool(t.user_attrs.get(BASELINE_ATTR)),
                args=tuple(rec.rendered_args),
                env=dict(rec.rendered_env),
                reason=rec.reason
                or (None if feasible or not rec.ok else "a constraint was not held (throughput or SLO)"),
            )
        )
    return out


def no_candidate_reason(cands: Sequence[Candidate], incumbent_args: Sequence[str], why_none: str) -> str:
    """Why no candidate can challenge the incumbent tonight, from what the search ran (``why_none``:
    why the search did not start; '' when it did)."""
    if why_none:
        return f"no candidate ran: {why_none}"
    others = [c for c in cands if list(c.args) != list(incumbent_args) and not c.baseline]
    if not others:
        if cands:
            return "no candidate ran: the search measured only the incumbent's own command"
        return "no candidate ran: the search stopped before its first trial (the budget)"
    counts = Counter(c.status for c in others)
    parts = [f"{n} {status}" for status, n in sorted(counts.items())]
    detail = next((c for c in others if c.reason), None)
    text = f"no candidate was feasible: {len(others)} ran ({', '.join(parts)})"
    if detail is not None:
        text += f"; trial #{detail.number} {detail.status}: {detail.reason}"
    return text


def worse_reason(best: Candidate, n_feasible: int, metric: str, incumbent: float) -> str:
    return (
        f"every candidate was worse: the best of {n_feasible} feasible, trial #{best.number}, "
        f"measured {metric} {figure_text(best.value, metric)} against the incumbent's "
        f"{figure_text(incumbent, metric)} tonight"
    )
