"""One trial of a group of models on one server: every engine started, every workload replayed at
the same time on its own timeline, each model's figures kept and the group scored.

Each model is measured by its own :class:`~autotune.trial.VllmEvaluator` (its own port, log and
process group under the guardian; on the CPU build its own cores, as ``--workers`` cuts them), on
a thread of its own. The engines meet at a barrier once each is healthy, so that no workload
starts before every engine is up. On the CPU build they start together (each pool is sized in bytes);
engines that share a GPU start one at a time, each once the one before it is healthy: vLLM sizes
its KV cache from the memory it sees used while it profiles, and another engine loading beside it is
counted against it (on the H200, two engines of 0.25 each started together got 15.8 and 6.0 GiB of
KV, 15-20 GiB of the other's load read as their own "non-torch memory"; one at a time, 0.22 GiB).
When one engine fails (refused before launch, fails to start, crashes), the others are stopped: at the barrier at once, during their replay at their next
checkpoint; each stops its engine on the way out, and the trial fails with that model's reason.

A capacity trial (``objective: capacity``) brackets the group's capacity: the highest multiplier of
every model's workload at which every model keeps its own SLOs. Each engine replays its own workload
at the level's multiplier of its own pace, the engines' levels run in step (they meet after each
level), and a level holds only where every model held it: every model's bracket then takes the same
next multiplier, and each model's capacity is its own workload's rate at the group's multiplier.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.study import GroupMode, GroupScore, ModelOutcome, TrialRecord, TrialStatus, group_score
from autotune.trial import VllmEvaluator
from autotune.tuning._gpus import for_gpus, plan_groups
from autotune.tuning.group._setup import GroupSetup

__all__ = ["GroupEvaluator", "GroupTrialResult"]

log = logging.getLogger(__name__)


class _GroupStopped(Exception):
    """Raised in a model's progress report at the barrier: another engine of the group failed."""


@dataclass(frozen=True)
class GroupTrialResult:
    """The group trial: each model's record (file order), its score and why it failed, if it did."""

    records: Mapping[str, TrialRecord]
    score: GroupScore
    failed_model: str | None = None  # the model whose engine failed first (None: none failed)
    reason: str | None = None  # why the trial failed or is infeasible (None: feasible)

    @property
    def ok(self) -> bool:
        return self.failed_model is None and self.score.feasible

    @property
    def measured(self) -> bool:
        """Every engine ran and every model has figures (an SLO missed is measured, not failed)."""
        return self.failed_model is None and all(
            r.status == TrialStatus.OK and r.figures is not None for r in self.records.values()
        )

    def figures(self, name: str, metric: str) -> float | None:
        rec = self.records[name]
        return rec.figures.get(metric) if rec.figures is not None and rec.status == TrialStatus.OK else None


@dataclass
class _Stop:
    """The group's shared stop: the first model to fail, and the barrier the engines meet at."""

    barrier: threading.Barrier
    turns: tuple[threading.Event, ...]  # turns[i] set: model i may start its engine
    names: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: str | None = None
    reason: str | None = None
    levels: threading.Barrier | None = None  # where the engines meet after each capacity level
    verdicts: dict[int, tuple[bool, str]] = field(default_factory=dict)  # this level's, by model
    joint: tuple[bool, str] = (True, "")  # the group's verdict on the level all have measured

    def __post_init__(self) -> None:
        self.levels = threading.Barrier(self.barrier.parties, action=self._judge)

    def _judge(self) -> None:
        """Run once a level, when every engine has measured it: it holds where every model held it."""
        broke = [f"{self.names[i]}: {why}" for i, (held, why) in sorted(self.verdicts.items()) if not held]
        self.joint = (not broke, "; ".join(broke))

    def fail(self, name: str, reason: str) -> None:
        with self.lock:
            if self.failed is None:
                self.failed, self.reason = name, reason
        for turn in self.turns:  # a model waiting for its turn to start goes on, to stop
            turn.set()
        self.barrier.abort()
        if self.levels is not None:
            self.levels.abort()

    def why(self) -> str | None:
        return None if self.failed is None else f"stopped: {self.failed} of the group failed ({self.reason})"


@dataclass(frozen=True)
class _GroupListener:
    """One engine's listener in a group trial: up, it gives the next engine its turn to start and
    waits for the others (the barrier; a broken one stops this engine); at each checkpoint it stops
    when another engine of the group failed."""

    stop: _Stop
    index: int

    def engine_up(self) -> None:
        if self.index + 1 < len(self.stop.turns):
            self.stop.turns[self.index + 1].set()
        try:
            self.stop.barrier.wait()
        except threading.BrokenBarrierError:
            raise _GroupStopped(self.stop.why() or "stopped") from None

    def checkpoint(self, step: int, figures: Mapping[str, Any]) -> str | None:
        return self.stop.why()

    def level(self, multiplier: float, held: bool, broke: str) -> tuple[bool, str]:
        """This model's verdict on a capacity level, held against every model's (the module's doc)."""
        assert self.stop.levels is not None
        self.stop.verdicts[self.index] = (held, broke)
        try:
            self.stop.levels.wait()
        except threading.BrokenBarrierError:
            raise _GroupStopped(self.stop.why() or "stopped") from None
        return self.stop.joint


def _brackets_in_step(evaluators: list[VllmEvaluator]) -> None:
    """Capacity trials of a group bracket one multiplier: every model's bracket starts, stops and
    bisects as the first model's does, up to the lowest ceiling any model's workload allows (each
    model keeps its own SLOs, failed-request allowance and level length)."""
    plans = [ev.capacity for ev in evaluators if ev.capacity is not None]
    if not plans:
        return
    lead = plans[0]
    ceiling = min(p.max_multiplier for p in plans)
    for ev in evaluators:
        assert ev.capacity is not None  # every model brackets, or none (the group setup's check)
        ev.capacity = dataclasses.replace(
            ev.capacity,
            start=lead.start,
            tolerance=lead.tolerance,
            max_levels=lead.max_levels,
            min_multiplier=lead.min_multiplier,
            max_multiplier=ceiling,
        )


@dataclass
class GroupEvaluator:
    """Measures one split and configuration of the whole group (see the module's doc)."""

    setup: GroupSetup
    log_dir: Path
    check_args: bool = True
    mode: GroupMode | None = None  # the group objective (None: the group file's group_objective:)
    # each model's vLLM caches under cache_root/NAME/cache (default: log_dir): a night's engines share
    # the study's, as one engine's nights do
    cache_root: Path | None = None
    evaluators: dict[str, VllmEvaluator] = field(init=False)

    def __post_init__(self) -> None:
        if self.mode is None:
            self.mode = self.setup.file.objective
        n = len(self.setup.models)
        first = self.setup.models[0].setup
        # on the CPU build each engine gets its own cores, as --workers cuts them; on GPUs all share them
        slots = plan_groups(first, None, workers=n) if self.setup.platform == "cpu" else ()
        self.evaluators = {}
        for i, m in enumerate(self.setup.models):
            s = for_gpus(m.setup, slots[i]) if slots else m.setup
            (self.log_dir / m.name).mkdir(parents=True, exist_ok=True)
            cache = (self.cache_root or self.log_dir) / m.name / "cache"
            self.evaluators[m.name] = s.evaluator(
                self.log_dir / m.name, check_args=self.check_args, cache_dir=cache
            )
        _brackets_in_step(list(self.evaluators.values()))

    def __call__(
        self,
        number: int,
        split: Mapping[str, float],
        values: Mapping[str, Mapping[str, Any]],
        baseline: GroupTrialResult | None = None,
    ) -> GroupTrialResult:
        """Trial ``number`` of the group under ``split`` (each model's fraction of the budget) and
        ``values`` (each model's own parameters); ``baseline``: the baseline group's trial (None: this is the baseline group, scored 1.0 against itself)."""
        names = self.setup.names
        turns = tuple(threading.Event() for _ in names)
        for i, turn in enumerate(turns):
            if i == 0 or not self.one_at_a_time:
                turn.set()
        stop = _Stop(threading.Barrier(len(names)), turns, tuple(names))
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="group-model") as pool:
            futures = {
                m.name: pool.submit(self._one, number, m.name, split[m.name], values.get(m.name, {}), stop)
                for m in self.setup.models
            }
            try:
                records = {n: futures[n].result() for n in names}
            except BaseException:  # Ctrl-C: every engine stops at its barrier or next checkpoint
                stop.fail("the tool", "interrupted")
                raise
        return self._result(records, stop, baseline)

    @property
    def one_at_a_time(self) -> bool:
        """Engines that share a GPU start one at a time (the module's doc); the CPU build's together."""
        return self.setup.platform != "cpu"

    def _one(
        self, number: int, name: str, fraction: float, own: Mapping[str, Any], stop: _Stop
    ) -> TrialRecord:
        index = self.setup.names.index(name)
        model = self.setup.models[index]
        config = model.config(self.setup.budget, fraction, own)
        stop.turns[index].wait()
        if stop.failed is not None:
            return TrialRecord(status=TrialStatus.FAILED, failure="group_stopped", reason=stop.why())
        try:
            record = self.evaluators[name](number, config, _GroupListener(stop, index))
        except _GroupStopped as exc:
            return TrialRecord(status=TrialStatus.FAILED, failure="group_stopped", reason=str(exc))
        except BaseException as exc:
            stop.fail(name, f"{type(exc).__name__}: {exc}")
            raise
        if record.status != TrialStatus.OK and stop.failed is None:
            stop.fail(name, record.reason or record.failure or str(record.status))
        return record

    def _result(
        self, records: Mapping[str, TrialRecord], stop: _Stop, baseline: GroupTrialResult | None
    ) -> GroupTrialResult:
        if stop.failed is not None:  # the first failure names the trial; the others were stopped
            reason = f"{stop.failed}: {stop.reason}"
            return GroupTrialResult(dict(records), GroupScore(None, {}, (reason,)), stop.failed, reason)
        outcomes = [self._outcome(m.name, records[m.name], baseline) for m in self.setup.models]
        score = self.score(outcomes)
        return GroupTrialResult(dict(records), score, None, "; ".join(score.reasons) or None)

    @property
    def noise_floor(self) -> float:
        """The smallest change that counts (``min_improvement``, the one-engine noise floor)."""
        return self.setup.models[0].setup.choices.min_improvement

    def score(self, outcomes: list[ModelOutcome], noise: float | None = None) -> GroupScore:
        """The group objective of ``outcomes``, as this study folds them (``noise``: a model worse
        beyond it makes a ``pareto`` group infeasible; default the noise floor)."""
        direction = self.setup.models[0].setup.objective.direction
        floor = self.noise_floor if noise is None else noise
        return group_score(outcomes, direction=direction, mode=self.mode or "pareto", noise=floor)

    def _outcome(self, name: str, rec: TrialRecord, baseline: GroupTrialResult | None) -> ModelOutcome:
        """One model's part: its figure against its figure in the baseline group, and the
        constraints of its own objective it broke (throughput against its baseline, its SLOs)."""
        model = next(m for m in self.setup.models if m.name == name)
        obj = model.setup.objective
        value = (
            rec.figures.get(obj.metric) if rec.figures is not None and rec.status == TrialStatus.OK else None
        )
        base_value = value if baseline is None else baseline.figures(name, obj.metric)
        base_tput = None if baseline is None else baseline.figures(name, "output_throughput")
        figures = rec.figures.raw if rec.figures is not None else None
        cons = obj.constraints(figures, base_tput, feasible=value is not None)
        broken = {
            c: _broken(c, rec, base_tput, obj.min_throughput_ratio, obj.slos_ms)
            for c, v in zip(obj.constraint_names(), cons, strict=True)
            if v > 0
        }
        relative = tuple(why for c, why in broken.items() if c == "throughput_vs_baseline")
        absolute = tuple(why for c, why in broken.items() if c != "throughput_vs_baseline")
        return ModelOutcome(
            name=name,
            value=value,
            baseline=base_value,
            weight=model.weight,
            violations=absolute if value is not None else (),
            relative=relative if value is not None else (),
            failure=None if rec.status == TrialStatus.OK else (rec.reason or rec.failure),
            metric=obj.metric,
        )


def _broken(
    name: str, rec: TrialRecord, base_tput: float | None, min_ratio: float, slos_ms: Mapping[str, float]
) -> str:
    """A broken constraint with the figures that broke it: the throughput floor with the model's
    tok/s, its share of its baseline's and the floor; an SLO with the figure and its limit."""
    f = rec.figures
    if f is None:
        return f"{name} not met"
    if name == "throughput_vs_baseline" and base_tput:
        got = f.output_throughput
        return (
            f"{name} not met ({got:.1f} tok/s, {got / base_tput:.0%} of its baseline's {base_tput:.1f}; "
            f"at least {min_ratio:.0%})"
        )
    if name.startswith("slo:") and (value := f.get(name[4:])) is not None:
        return f"{name} not met ({value:.0f} ms, at most {slos_ms[name[4:]]:.0f} ms)"
    return f"{name} not met"
