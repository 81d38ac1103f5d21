"""Re-measure two configurations side by side: A B A B ..., each in a fresh vLLM.

The machine drifts (other jobs, thermals), so absolute times from different moments do not
compare; alternating the arms and reporting the ratio of their medians does. Used to check
that an exported config's gain over vLLM's defaults holds outside the study. The alternation
itself (:func:`alternate`) knows nothing of engines: one engine's compare and a group's
confirmation (``tuning/group/_confirm.py``, N engines a run) both run their rounds through it.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from autotune.errors import ConfigError
from autotune.export import config_to_args
from autotune.metrics import COMPARED, Source, shown_in
from autotune.space import EngineConfig
from autotune.study import Evaluator, TrialRecord

__all__ = [
    "ArmSummary",
    "Comparison",
    "alternate",
    "compare_configs",
    "compare_recorded",
    "config_to_args",
    "read_measurement",
    "significant_gain",
]

_FIGURES = shown_in(COMPARED, sources=(Source.LATENCY, Source.RATE))  # the replay's figures
_ENGINE_FIGURES = shown_in(COMPARED, sources=(Source.ENGINE,))  # the engine's counters beside them
# config_to_args is read in export/ (the one reader of a vLLM config file) and named here too for
# cli/compare.py, until it imports it from export/.
DISAGREE_FACTOR = 1.5  # runs of one arm further apart than this are flagged (restart noise: 5-25%)

Arm = TypeVar("Arm")  # what one arm runs: a rendered config, a group trial
Result = TypeVar("Result")  # what one run gives: a trial record, a group's result


@dataclass(frozen=True)
class ArmSummary:
    name: str
    args: tuple[str, ...]
    runs: tuple[TrialRecord, ...]  # in measurement order
    figures: Mapping[str, Sequence[float]] = field(default_factory=dict)  # figure -> one value per run

    @property
    def measured(self) -> bool:
        """At least one run produced figures."""
        return any(r.ok for r in self.runs)

    def median(self, name: str) -> float | None:
        vals = self.figures.get(name) or []
        return statistics.median(vals) if vals else None

    def spread(self, name: str) -> tuple[float, float] | None:
        vals = self.figures.get(name) or []
        return (min(vals), max(vals)) if vals else None


@dataclass(frozen=True)
class Comparison:
    a: ArmSummary
    b: ArmSummary

    def ratio(self, name: str) -> float | None:
        """B's median over A's median."""
        ma, mb = self.a.median(name), self.b.median(name)
        return mb / ma if ma and mb is not None else None

    def as_dict(self) -> dict[str, Any]:
        def arm(s: ArmSummary) -> dict[str, Any]:
            return {
                "name": s.name,
                "args": list(s.args),
                "median": {f: s.median(f) for f in s.figures},
                "spread": {f: s.spread(f) for f in s.figures},
                "values": {f: list(v) for f, v in s.figures.items()},
                "failed_runs": sum(not r.ok for r in s.runs),
            }

        return {
            "a": arm(self.a),
            "b": arm(self.b),
            "ratio_b_over_a": {f: self.ratio(f) for f in _FIGURES},
            "disagreeing": self.disagreeing(),
        }

    def disagreeing(self, factor: float = DISAGREE_FACTOR) -> list[str]:
        """A line for each arm whose runs of a time-to-token figure lie more than ``factor`` apart
        (slowest over fastest): one run unlike its twin is not evidence, and with few rounds the
        median is then mostly that run (seen on the H200: 212 and 965 ms for one command)."""
        lines = []
        for arm in (self.a, self.b):
            for name in ("ttft_p50", "ttft_p90"):
                lo_hi = arm.spread(name)
                if lo_hi is None or lo_hi[0] <= 0 or len(arm.figures.get(name) or ()) < 2:
                    continue
                lo, hi = lo_hi
                if hi / lo > factor:
                    lines.append(
                        f"{arm.name}: its runs disagree on {name} ({lo:.1f}-{hi:.1f} ms, {hi / lo:.1f}x apart); "
                        "the median is not evidence (fix: more --rounds, and look at that run's log)"
                    )
                    break
        return lines


def _figures(record: TrialRecord, extra: Sequence[str] = ()) -> dict[str, float]:
    f = record.figures
    if not record.ok or f is None:
        return {}
    out = {name: v for name in (*_FIGURES, *extra) if (v := f.get(name)) is not None}
    counted = record.metrics.raw if record.metrics is not None else {}
    out.update({name: v for name in _ENGINE_FIGURES if (v := counted.get(name)) is not None})
    return out


def alternate(
    arms: Sequence[tuple[str, Arm]],
    rounds: int,
    run: Callable[[int, Arm, Sequence[Result]], Result],
    *,
    first_number: int = 0,
    on_run: Callable[[str, int, Result], None] | None = None,
    stop: Callable[[Sequence[Result]], str | None] | None = None,
    start: Callable[[int], str | None] | None = None,
) -> tuple[tuple[tuple[Result, ...], ...], str | None]:
    """Run the arms in turn, ``rounds`` times each (A B A B ...).

    ``run(number, arm, this_round)`` measures one arm; the numbers count up from ``first_number`` in
    the order the runs start, and ``this_round`` holds the results of the arms before it in this
    round (a candidate is judged against this round's baseline). ``on_run(label, round, result)``
    follows each run. After each round ``stop(this_round)`` may end the rounds early, saying why
    (None: go on); before each round ``start(round)`` may too (a budget that would not hold it).
    Returns each arm's results in run order, and why the rounds ended early (None:
    every round ran).
    """
    runs: list[list[Result]] = [[] for _ in arms]
    number = first_number
    for r in range(rounds):
        why = None if start is None else start(r)
        if why is not None:
            return tuple(tuple(x) for x in runs), why
        this_round: list[Result] = []
        for i, (label, arm) in enumerate(arms):
            result = run(number, arm, tuple(this_round))
            number += 1
            this_round.append(result)
            runs[i].append(result)
            if on_run is not None:
                on_run(label, r, result)
        why = None if stop is None else stop(this_round)
        if why is not None:
            return tuple(tuple(x) for x in runs), why
    return tuple(tuple(x) for x in runs), None


def _config(args: Sequence[str] | EngineConfig) -> EngineConfig:
    """An arm's configuration: typed, or a file's flags (passed to the engine as given)."""
    return args if isinstance(args, EngineConfig) else EngineConfig.recorded(tuple(args))


def _arm(name: str, args: tuple[str, ...], runs: Sequence[TrialRecord], extra: Sequence[str]) -> ArmSummary:
    figs: dict[str, list[float]] = {}
    for record in runs:
        for key, value in _figures(record, extra).items():
            figs.setdefault(key, []).append(value)
    return ArmSummary(name, args, tuple(runs), figs)


def compare_configs(
    evaluator: Evaluator,
    arms: Sequence[tuple[str, Sequence[str] | EngineConfig]],
    *,
    rounds: int,
    on_run: Callable[[str, int, TrialRecord], None] | None = None,
    extra_figures: Sequence[str] = (),
) -> Comparison:
    """Measure arm A and arm B alternately ``rounds`` times each (A B A B ..., :func:`alternate`),
    numbered from 0; the environment a configuration sets comes along."""
    if len(arms) != 2 or rounds < 1:
        raise ConfigError("compare needs exactly two configurations and --rounds >= 1")
    configs = [(name, _config(args)) for name, args in arms]
    (a, b), _ = alternate(configs, rounds, lambda n, config, _: evaluator(n, config), on_run=on_run)
    (na, ca), (nb, cb) = configs
    words_a, words_b = evaluator.render(ca).args, evaluator.render(cb).args
    return Comparison(a=_arm(na, words_a, a, extra_figures), b=_arm(nb, words_b, b, extra_figures))


def read_measurement(path: Path) -> TrialRecord:
    """A measurement as ``autotune bench --json-out`` writes it: a trial record's keys (and ``bench``)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path}: cannot read the measurement: {exc} (fix: a file of `bench --json-out`)"
        ) from None
    if not isinstance(data, dict) or "status" not in data or "figures" not in data:
        raise ConfigError(
            f"{path}: not a measurement (no 'status' and 'figures' keys) (fix: a file `autotune bench "
            "--json-out` wrote, or a vLLM config YAML to measure)"
        )
    return TrialRecord.from_attrs(data)


def compare_recorded(a: tuple[str, TrialRecord], b: tuple[str, TrialRecord]) -> Comparison:
    """Two measurements already made (nothing launched): each arm's figures, per pass where the record
    kept its passes (their median is the record's figure), so the table shows a median and a range."""
    arms = []
    for name, rec in (a, b):
        figs = {key: [value] for key, value in _figures(rec).items()}
        for key in figs:
            passes = rec.pass_values(key) if rec.ok else []
            if len(passes) > 1:
                figs[key] = passes
        arms.append(ArmSummary(name, rec.command, (rec,), figs))
    return Comparison(a=arms[0], b=arms[1])


def significant_gain(
    result: Comparison, metric: str, *, maximize: bool, min_improvement: float = 0.03
) -> tuple[bool, str]:
    """Is arm B better than arm A on ``metric`` by more than the noise?

    The median gain must exceed ``min_improvement`` (a noise floor) and, with two or more runs per
    arm, every run of B must beat every run of A (the ranges do not overlap). Non-overlap alone is
    not enough: two identical configurations measured twice each do not overlap one time in six.
    """
    a, b = result.a.figures.get(metric) or [], result.b.figures.get(metric) or []
    if not a or not b:
        return False, f"no {metric} measured for both configurations"
    sign = -1.0 if maximize else 1.0
    med_a, med_b = statistics.median(a), statistics.median(b)
    diff = sign * (med_a - med_b)
    # a baseline of 0 (a capacity whose lowest level broke its SLO): any figure above it is a gain
    gain = diff / abs(med_a) if med_a else math.copysign(math.inf, diff) if diff else 0.0
    above_floor = gain > min_improvement
    why = f"gain {'above' if above_floor else 'within'} the {min_improvement:.0%} noise floor"
    ok = above_floor
    if len(a) >= 2 and len(b) >= 2:
        disjoint = max(sign * v for v in b) < min(sign * v for v in a)
        ok = ok and disjoint
        why += ", ranges do not overlap" if disjoint else ", ranges overlap"
    if math.isinf(gain):
        moved = f"{'better' if gain > 0 else 'worse'} than A's 0"
    else:
        moved = f"{gain:.1%} better" if gain >= 0 else f"{-gain:.1%} worse"
    return ok, f"{metric}: median {med_a:.4g} -> {med_b:.4g} ({moved}), {why}"
