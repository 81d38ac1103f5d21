"""The night's plan, from measured costs: how many engine runs the re-measurement, the search and
the promotion check take, and whether the budget holds them.

A run's cost is its wall time: the start-up once (a record's ``timings_s`` also holds the start-up's
parts, ``startup_*``, which are inside it), the warm-up, the replay and the teardown. The plan is
made before anything runs, from the costs measured by earlier nights and the study's trials, and
the clock re-reads the costs measured tonight before it starts each new run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import optuna
import psutil

from autotune.study import TrialRecord, completed_trials, read_record

__all__ = [
    "DEFAULT_RUN_S",
    "MIN_CANDIDATES",
    "NightPlan",
    "make_plan",
    "measured_run_cost",
    "open_clock",
    "process_start",
    "promotion_rounds",
    "run_cost",
]

DEFAULT_RUN_S = 60.0  # an engine run's cost before anything was measured
MIN_CANDIDATES = 2  # a search shorter than this is not worth the night's re-measurement
SLACK = 0.05  # the share of the budget kept back for what the plan cannot see (reports, exports)


def process_start() -> float:
    """This process's start, on the ``time.monotonic()`` scale: a night's budget counts from here (the
    interpreter's start-up, the imports and the setup included), not from its first step."""
    try:
        age = time.time() - psutil.Process().create_time()
    except (psutil.Error, OSError):
        age = 0.0
    return time.monotonic() - max(age, 0.0)


def run_cost(rec: TrialRecord) -> float:
    """Seconds one engine run took: the start-up once (its ``startup_*`` parts are inside it)."""
    return sum(v for k, v in rec.timings_s.items() if not k.startswith("startup_") and v > 0)


@dataclass
class _Clock:
    budget_s: float
    t0: float = field(default_factory=time.monotonic)  # the CLI passes process_start()
    run_costs: list[float] = field(default_factory=list)  # seconds per engine run tonight
    prior_costs: Sequence[float] = ()  # earlier nights' and trials' costs: until tonight measured one

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds left for engine runs: the budget less the reports' share (``SLACK``) and the time spent."""
        return self.budget_s * (1 - SLACK) - self.elapsed()

    def per_run(self) -> float:
        costs = self.run_costs or list(self.prior_costs)
        return statistics.median(costs) if costs else DEFAULT_RUN_S

    def note(self, rec: TrialRecord) -> None:
        cost = run_cost(rec)
        if cost > 0:
            self.run_costs.append(cost)

    def can_start(self, runs: int, reserve_runs: int = 0) -> bool:
        """Can ``runs`` more runs start now and still leave ``reserve_runs`` for what follows
        (:meth:`NightPlan.reserve_after`) and the reports' share of the budget (``SLACK``)?"""
        return (runs + reserve_runs) * self.per_run() <= self.left()


def measured_run_cost(study: optuna.Study, earlier: Sequence[Mapping[str, Any]] = ()) -> list[float]:
    """Costs measured before tonight: earlier nights' runs (their plans' figures), else the study's
    trials (the latest 20 that started an engine)."""
    costs = [float(c) for night in earlier for c in (night.get("run_costs") or ())]
    if costs:
        return costs[-20:]
    for t in completed_trials(study):  # measured or not: an engine start that failed cost its time too
        rec = read_record(t)
        if rec.duplicate_of is None and rec.startup_s:
            costs.append(run_cost(rec))
    return costs[-20:]


@dataclass(frozen=True)
class NightPlan:
    """What tonight will run, and what it costs at ``per_run_s`` seconds an engine run."""

    budget_s: float
    per_run_s: float
    cost_source: str
    arms: tuple[str, ...]  # the re-measurement's arms
    rounds: int  # tonight's rounds (shrunk from ``asked_rounds`` when the budget is short)
    asked_rounds: int
    search: bool  # False: --max-trials 0
    candidates: int  # the search's share, in engine runs
    promotion_runs: int
    smallest_budget_s: float  # holds the re-measurement at one round, 2 candidates and the check
    fits: bool

    def reserve_after(self, phase: Literal["remeasure", "search", "promotion"]) -> int:
        """The one table of what a phase leaves for those after it, in engine runs: the
        re-measurement keeps the search's smallest share and the promotion check, the search keeps
        the check, the check keeps nothing; the reports' share is ``SLACK`` of the budget, which the
        clock keeps back from every phase."""
        if not self.search:
            return 0
        return {"remeasure": MIN_CANDIDATES + self.promotion_runs, "search": self.promotion_runs}.get(
            phase, 0
        )

    @property
    def remeasure_runs(self) -> int:
        return len(self.arms) * self.rounds

    def lines(self) -> list[str]:
        m = self.per_run_s / 60
        out = [
            f"plan: {self.budget_s / 60:.1f} min at {m:.1f} min an engine run ({self.cost_source})",
            f"  re-measurement: {self.rounds} round(s) of {len(self.arms)} arm(s) "
            f"({', '.join(self.arms)}) = {self.remeasure_runs} run(s), {self.remeasure_runs * m:.1f} min",
        ]
        if not self.search:
            out.append("  search and promotion check: off (--max-trials 0)")
        else:
            out.append(f"  search: about {self.candidates} candidate(s), {self.candidates * m:.1f} min")
            out.append(
                f"  promotion check: {self.rounds} round(s) of 2 arms = {self.promotion_runs} run(s), "
                f"{self.promotion_runs * m:.1f} min, when a candidate beats the incumbent"
            )
        if self.rounds < self.asked_rounds:
            out.append(
                f"  the budget is short: {self.rounds} round(s) instead of {self.asked_rounds}, "
                "so that the search still runs"
            )
        if not self.fits:
            what = f", {MIN_CANDIDATES} candidates and the promotion check" if self.search else ""
            out.append(
                f"  the budget cannot hold the re-measurement{what}: that needs at least {self.smallest_budget_s / 60:.1f} min "
                f"(fix: --budget {math.ceil(self.smallest_budget_s / 60)}m or more)"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "remeasure_runs": self.remeasure_runs, "lines": self.lines()}


def make_plan(
    budget_s: float,
    costs: Sequence[float],
    *,
    arms: Sequence[str],
    rounds: int,
    search: bool = True,
    source: str | None = None,
) -> NightPlan:
    """Tonight's plan: the rounds asked for when the budget holds them with ``MIN_CANDIDATES``
    candidates and the promotion check; fewer rounds (down to one) when it does not."""
    per_run = statistics.median(costs) if costs else DEFAULT_RUN_S
    if source is None:
        source = (
            f"median of {len(costs)} measured run(s)"
            if costs
            else f"assumed {DEFAULT_RUN_S:.0f} s: nothing measured yet"
        )
    usable = budget_s * (1 - SLACK)
    want = MIN_CANDIDATES if search else 0

    def runs_at(r: int) -> int:  # no search, no promotion check
        return len(arms) * r + (want + 2 * r if search else 0)

    chosen = rounds
    while chosen > 1 and runs_at(chosen) * per_run > usable:
        chosen -= 1
    smallest = runs_at(1) * per_run / (1 - SLACK)
    fits = runs_at(chosen) * per_run <= usable
    candidates = max(int(usable // per_run) - len(arms) * chosen - 2 * chosen, 0) if search else 0
    return NightPlan(
        budget_s=budget_s,
        per_run_s=per_run,
        cost_source=source,
        arms=tuple(arms),
        rounds=chosen,
        asked_rounds=rounds,
        search=search,
        candidates=candidates,
        promotion_runs=2 * chosen if search else 0,
        smallest_budget_s=smallest,
        fits=fits,
    )


def open_clock(
    budget_s: float,
    started: float | None,
    costs: Sequence[float],
    *,
    arms: Sequence[str],
    rounds: int,
    search: bool,
    say: Callable[[str], None],
) -> tuple[_Clock, NightPlan]:
    """Tonight's clock (from ``started``, the process start the CLI gives; None: now) and its plan,
    printed first: one engine's night and a group's alike."""
    clock = _Clock(budget_s, prior_costs=costs)
    if started is not None:
        clock.t0 = started
    plan = make_plan(budget_s, costs, arms=arms, rounds=rounds, search=search)
    for line in plan.lines():
        say(line)
    return clock, plan


def promotion_rounds(clock: _Clock, plan: NightPlan) -> int:
    """The promotion check's rounds: as many as tonight's measured costs allow, at least one."""
    rounds = plan.asked_rounds
    while rounds > 1 and not clock.can_start(2 * rounds, plan.reserve_after("promotion")):
        rounds -= 1
    return rounds
