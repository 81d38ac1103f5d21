"""Tonight's state and its first steps: the plan (printed first), the fingerprints and what changed,
the incumbent and the baseline, and their re-measurement (one arm when they are the same command)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import same_flags
from autotune.export import config_to_args
from autotune.nightly._fingerprint import describe_changes, fingerprints, workload_changes
from autotune.nightly._history import NIGHT_ATTR, NightRecord, last_night, nights
from autotune.nightly._plan import NightPlan, _Clock, measured_run_cost, open_clock, promotion_rounds
from autotune.nightly._verdict import Band, figure_of, noise_band
from autotune.space import EngineConfig, RenderedConfig
from autotune.study import (
    REFERENCE_ATTR,
    TrialHooks,
    TrialRecord,
    baseline_trial,
    figure_text,
    reference_config,
    run_study,
)
from autotune.trial import VllmEvaluator, alternate
from autotune.tuning import TrialScope, TuningSetup

__all__ = ["NightOptions", "NightState", "begin_night", "remeasure"]


@dataclass(frozen=True)
class NightOptions:
    """One night's options, for one engine or a group (a group's incumbent is the group deployed in
    ``out``: ``incumbent`` and ``top_k`` are one engine's)."""

    budget_s: float
    out: Path
    rounds: int = 2
    min_improvement: float = 0.03
    incumbent: Path | None = None  # the deployed config (YAML); default: ``out`` when it exists
    top_k: int = 3  # previous nights' best configurations re-tried first
    max_trials: int | None = None  # cap on new trials (tests); None: the budget decides
    started: float | None = None  # time.monotonic() of the process start (the CLI's); None: now


@dataclass
class NightState:
    """What every night holds, of one engine or of a group: its study and folder, its options, where
    its lines go, its number, its clock and plan, and what changed since the last night."""

    study: optuna.Study
    sdir: Path
    options: NightOptions
    say: Callable[[str], None]
    number: int
    clock: _Clock
    plan: NightPlan
    changes: list[str]

    def room_to_search(self) -> bool:
        """Can one more search run start and leave the promotion check its runs (the plan's reserve)?"""
        return self.clock.can_start(1, self.plan.reserve_after("search"))

    def room_to_confirm(self) -> bool:
        """Can the promotion check (2 runs at least) still start?"""
        return self.clock.can_start(2, self.plan.reserve_after("promotion"))

    def confirm_rounds(self) -> int:
        """The promotion check's rounds: as many as tonight's measured costs allow, at least one."""
        return promotion_rounds(self.clock, self.plan)


@dataclass
class _Night(NightState):
    """One engine's night: tonight's state, as the steps fill it in."""

    setup: TuningSetup
    previous: NightRecord | None
    inc_label: str
    inc_config: EngineConfig
    inc_params: dict[str, Any] | None
    base_config: EngineConfig
    one_arm: bool
    fp: dict[str, dict[str, Any]]
    drift: list[str]
    runs: list[dict[str, Any]] = field(default_factory=list)
    inc_figure: dict[str, Any] | None = None
    base_figure: dict[str, Any] | None = None
    band: Band = field(default_factory=lambda: Band(None, ""))
    search_stop: str = ""  # why the search stopped, when not the budget (repeats, idle candidates)

    @property
    def metric(self) -> str:
        return self.setup.objective.metric

    def inc_words(self) -> RenderedConfig:
        """The incumbent in its engine's words (what the night records and compares candidates to)."""
        return self.setup.engine.render(self.inc_config)

    @property
    def maximize(self) -> bool:
        return self.setup.objective.direction == "maximize"

    def evaluator(self, phase: str = "") -> VllmEvaluator:
        """Tonight's evaluator for ``phase`` (its logs under night-NNNN/``phase``); every engine of
        every night shares the study's vLLM caches, as ``run``'s trials do: a cold cache costs each
        start its model inspection on the CPU build and its compilation on a GPU."""
        logs = self.sdir / f"night-{self.number:04d}"
        return self.setup.evaluator(logs / phase if phase else logs, cache_dir=self.sdir / "cache")

    def on_run(self, phase: str, name: str, r: int, rec: TrialRecord) -> None:
        self.clock.note(rec)
        value = rec.metric(self.metric)
        self.runs.append(
            {
                "phase": phase,
                "arm": name,
                "round": r + 1,
                "status": rec.status.value,
                "value": value,
                "startup_s": rec.startup_s,
                "pass_spread": rec.pass_spread(self.metric),
                "reason": rec.reason,
            }
        )
        shown = "-" if value is None else figure_text(value, self.metric)  # 4758.0 ms, not 4757.980201049941
        self.say(f"  {name} round {r + 1}: {rec.status.value} {self.metric}={shown}")


def _same(setup: TuningSetup, a: EngineConfig, b: EngineConfig) -> bool:
    """Do ``a`` and ``b`` launch the same engine command? Compared as launched: the fixed and
    baseline flags added, flag order aside (a deployed file holds every flag of its command, a
    study's baseline none: the run's export of its baseline is that baseline, one arm, not two)."""

    words_a, words_b = setup.engine.render(a), setup.engine.render(b)
    return same_flags(setup.engine_argv(a), setup.engine_argv(b)) and dict(words_a.env) == dict(words_b.env)


def _incumbent(
    setup: TuningSetup, study: optuna.Study, options: NightOptions, previous: NightRecord | None
) -> tuple[str, EngineConfig, dict[str, Any] | None]:
    """(label, configuration, params when it came from this study): the deployed file (--incumbent,
    else the export path when it exists, whoever wrote it: `run`, a night, a rollback, a person),
    else the last promotion, else the baseline."""
    deployed = options.incumbent or (options.out if Path(options.out).is_file() else None)
    if deployed is not None:
        _, args = config_to_args(deployed)
        known = previous.incumbent_params if previous and previous.incumbent_args == args else None
        label = f"incumbent {deployed.name}" + ("" if options.incumbent else " (deployed)")
        return label, EngineConfig.recorded(args), known  # params: the same file as last night
    if previous is not None and previous.incumbent_args is not None:
        return (
            "incumbent (last promoted)" if previous.incumbent_params else "incumbent (baseline)",
            EngineConfig.recorded(previous.incumbent_args, previous.incumbent_env),
            previous.incumbent_params,
        )
    return "incumbent (baseline)", _baseline_config(setup, study), {}


def _baseline_config(setup: TuningSetup, study: optuna.Study) -> EngineConfig:
    return reference_config(setup.space, study.user_attrs.get(REFERENCE_ATTR))


def begin_night(
    setup: TuningSetup, study: optuna.Study, sdir: Path, options: NightOptions, say: Callable[[str], None]
) -> _Night:
    """The plan, printed first, then what changed since the last night."""
    previous = last_night(study)
    number = (previous.number + 1) if previous else 1
    inc_label, inc_config, inc_params = _incumbent(setup, study, options, previous)
    base_config = _baseline_config(setup, study)
    one_arm = _same(setup, inc_config, base_config)
    clock, plan = open_clock(
        options.budget_s,
        options.started,
        measured_run_cost(study, [n.as_dict() for n in nights(study)]),
        arms=(inc_label,) if one_arm else ("baseline", inc_label),
        rounds=options.rounds,
        search=options.max_trials != 0,
        say=say,
    )
    if one_arm:
        say("  the incumbent's command is the baseline's: its runs give both figures")
    fp = fingerprints(setup)
    prev_fp = previous.fingerprints if previous else None
    changes, drift = describe_changes(prev_fp, fp), workload_changes(prev_fp, fp)
    for line in changes:
        say(f"changed since night {previous.number if previous else '-'}: {line}")
    if drift:
        say("the workload changed: " + "; ".join(drift))
    return _Night(
        setup=setup,
        study=study,
        sdir=sdir,
        options=options,
        say=say,
        number=number,
        previous=previous,
        clock=clock,
        plan=plan,
        inc_label=inc_label,
        inc_config=inc_config,
        inc_params=inc_params,
        base_config=base_config,
        one_arm=one_arm,
        fp=fp,
        changes=changes,
        drift=drift,
    )


def remeasure(n: _Night) -> None:
    """The incumbent and the baseline, alternately (one arm when they are the same command). A
    study whose baseline never ran measures it as its trial #0, which is then the baseline's round 1
    (the search re-uses it: one start fewer on a first night)."""
    arms = (
        [(n.inc_label, n.inc_config)]
        if n.one_arm
        else [("baseline", n.base_config), (n.inc_label, n.inc_config)]
    )
    n.say(f"night {n.number}: re-measuring {' and '.join(a for a, _ in arms)}, {n.plan.rounds} round(s)")
    evaluator = n.evaluator("remeasure")
    first: TrialRecord | None = None  # round 1 of arms[0] (the baseline's, or the one arm): trial #0
    if baseline_trial(n.study) is None:
        rec = _baseline_as_trial(n)
        # used only if it ran that arm's command (a re-check at its launch may have switched vLLM's
        # defaults to a reference that fits the machine as it is now)
        if (
            rec is not None
            and rec.baseline
            and _same(n.setup, EngineConfig.recorded(rec.rendered_args, rec.rendered_env), arms[0][1])
        ):
            first = rec
        elif rec is not None:
            n.clock.note(rec)  # its cost counts; the arm's round 1 runs as planned
    after = n.plan.reserve_after("remeasure")
    numbers = itertools.count()  # trial #0, when it is round 1 of arms[0], takes no number
    reused = [first] if first is not None else []

    def run(_: int, config: EngineConfig, this_round: Sequence[TrialRecord]) -> TrialRecord:
        return reused.pop() if reused and not this_round else evaluator(next(numbers), config)

    def start(r: int) -> str | None:
        if r > 0 and not n.clock.can_start(len(arms), after):
            n.say(f"  round {r + 1} of the re-measurement left out: the budget would not hold what follows")
            return "budget"
        if r >= n.plan.rounds:
            n.say(f"  round {r + 1} too: tonight's runs cost {n.clock.per_run():.0f} s, less than planned")
        return None

    runs, _ = alternate(
        arms,
        n.plan.asked_rounds,
        run,
        on_run=lambda name, r, rec: n.on_run("re-measurement", name, r, rec),
        start=start,
    )
    records = {name: list(res) for (name, _), res in zip(arms, runs, strict=True)}
    prior_bands = [p.noise_band for p in nights(n.study)]  # every earlier night, banded or not
    n.band = noise_band(list(records.values()), n.metric, prior_bands)
    n.inc_figure = figure_of(records[n.inc_label], n.metric)
    n.base_figure = n.inc_figure if n.one_arm else figure_of(records["baseline"], n.metric)


def _baseline_as_trial(n: _Night) -> TrialRecord | None:
    got: list[TrialRecord] = []
    policy = n.setup.policy(TrialScope(n.sdir, attrs={NIGHT_ATTR: n.number}))
    evaluator = n.evaluator()
    run_study(n.study, policy, evaluator, 1, TrialHooks(on_done=lambda rep: got.append(rep.record)))
    return got[0] if got else None
