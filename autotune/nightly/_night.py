"""One night: re-measure what is deployed, search from what was good, promote only a proven gain.

0. A plan from measured costs (earlier nights' runs, else the study's trials), printed first:
   the re-measurement's rounds and arms, the search's share and the promotion check; fewer rounds
   when the budget is short, so that the search still runs.
1. Fingerprints of the environment and the workload, compared with the last night's; a new day's
   traffic is named in words (requests, prompt tokens, reuse, working set).
2. The incumbent (``--incumbent``, else the export ``out`` when it exists, else the last promoted
   config, else the baseline) and the
   baseline (vLLM's defaults, or the study's runnable reference), alternately: tonight's noise band
   and the regression verdict. One arm when the incumbent's command is the baseline's.
3. A warm-started search: the incumbent, the previous nights' top configurations and the prior's
   picks for tonight's workload first, then new trials, while the budget holds the promotion check.
4. The best candidate of tonight against the incumbent, alternately; promoted only when it wins
   by more than the noise with every constraint held. The reason names what happened.

One pipeline for N >= 1 engines: :func:`run_night` runs these steps, as a :class:`NightSteps`
gives them, and keeps one :class:`NightRecord` a night. One engine's steps are here
(:func:`engine_night`); a group's (several models on one server: the split, the shared budget,
the launch file) are in :mod:`autotune.nightly._group_night`; both share the clock and the plan's
reserve table (:func:`open_clock`), the promotion check's rounds and the record.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import optuna

from autotune.export import config_to_args, export_best, exports_the_same
from autotune.nightly._decide import Candidate, candidates_of, no_candidate_reason, worse_reason
from autotune.nightly._history import NIGHT_ATTR, NightRecord, nights, save_night
from autotune.nightly._plan import make_plan
from autotune.nightly._promote import keep_promoted, promoted_history
from autotune.nightly._tonight import NightOptions, _Night, begin_night, remeasure
from autotune.nightly._verdict import figure_of, regression, regression_against_baseline
from autotune.space import EngineConfig
from autotune.study import TrialHooks, TrialReport, figure_text, run_study
from autotune.trial import compare_configs, significant_gain
from autotune.tuning import TrialScope, TuningSetup

__all__ = ["NightDecision", "NightOptions", "NightSteps", "engine_night", "run_night"]

log = logging.getLogger(__name__)
IDLE_STOP = 20  # candidates in a row that start no engine (refused before launch, vetoed) end the search


def _search(n: _Night) -> str:
    """The warm-started search while the budget holds the promotion check; '' when it started,
    else why it did not."""
    if n.options.max_trials == 0:
        return "--max-trials 0 turned the search off"
    reserve = n.plan.reserve_after("search")
    if not n.room_to_search():
        return (
            f"the re-measurement took {n.clock.elapsed() / 60:.1f} of {n.options.budget_s / 60:.1f} min, "
            f"leaving no room for one run ({n.clock.per_run() / 60:.1f} min) and the promotion check"
        )
    _warm_start(n)
    repeats = {"n": 0}  # a small space runs out: configurations the sampler proposes again
    idle: list[str] = []  # why the candidates since the last engine start did not start one

    def on_trial(rep: TrialReport) -> None:
        if rep.record.duplicate_of is None:
            n.clock.note(rep.record)
            repeats["n"] = 0
        else:
            repeats["n"] += 1
        started = rep.record.startup_s is not None  # a reused twin: whether the twin started one
        idle[:] = [] if started else [*idle, rep.record.reason or rep.record.status.value]
        shown = "-" if rep.value is None else figure_text(rep.value, n.metric)
        n.say(f"  trial #{rep.number}: {rep.record.status.value} {n.metric}={shown}")

    def should_stop() -> bool:
        if repeats["n"] >= 5:
            n.search_stop = "the sampler proposed already measured configurations 5 times in a row"
        elif len(idle) >= IDLE_STOP:  # e.g. fixed flags that leave no room: every candidate refused at once
            n.search_stop = f"the last {IDLE_STOP} candidates could not start an engine ({idle[-1]})"
        if n.search_stop:
            n.say(f"stopped the search: {n.search_stop}")
            return True
        return not n.room_to_search()

    run_study(
        n.study,
        n.setup.policy(night_scope(n)),
        n.evaluator(),
        n.options.max_trials,
        TrialHooks(on_done=on_trial, should_stop=should_stop),
        max(n.clock.left() - reserve * n.clock.per_run(), 1.0),
    )
    return ""


def _warm_start(n: _Night) -> None:
    """The incumbent and the previous nights' top configurations first, then the prior's picks."""
    warm = list(n.previous.top_params if n.previous else [])
    if n.inc_params:
        warm.insert(0, n.inc_params)
    for params in [p for i, p in enumerate(warm) if p and p not in warm[:i]]:
        n.study.enqueue_trial(params, skip_if_exists=False)
    prior = n.setup.prior  # built once with the setup (cli/nightly.py), announced as the study opened
    for line in prior.lines if prior is not None else ():
        log.info(line)
    if prior is not None:
        added = prior.enqueue(n.study, scope={NIGHT_ATTR: n.number} if n.changes else None)
        if n.drift and added:
            n.say(
                f"searching from the incumbent and from the prior's {len(added)} pick(s) for the new workload"
            )
        elif n.drift:
            why = "tonight measured its picks" if prior.candidates else "it predicts the baseline best"
            n.say(f"searching from the incumbent; the prior adds no pick for the new workload ({why})")


def night_scope(n: _Night) -> TrialScope:
    """Tonight's trials: tagged with the night's number; after a change (workload, fixed flags)
    tonight's own measurements are the only twins reused and the only incumbents a candidate is
    held against (the 4-night series on the CPU build pruned every candidate of night 4 against
    night 1's best, 879.7 ms, measured on another workload)."""
    tonight = {NIGHT_ATTR: n.number}
    return TrialScope(n.sdir, attrs=tonight, fresh=tonight if n.changes else None)


@dataclass(frozen=True)
class NightDecision:
    """What tonight decided: promoted, kept or nothing_feasible, and why (one engine's or a group's)."""

    decision: str
    reason: str
    promoted: int | None = None


def _challengers(n: _Night, cands: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """Tonight's feasible trials, best first, and those of them that differ from what is deployed."""
    sign = -1.0 if n.maximize else 1.0
    pool = sorted((c for c in cands if c.feasible and not c.baseline), key=lambda c: sign * (c.value or 0.0))
    trials = {t.number: t for t in n.study.get_trials(deepcopy=False)}
    challengers = [
        c
        for c in pool
        if list(c.args) != list(n.inc_words().args) and not exports_the_same(trials[c.number], n.options.out)
    ]
    return pool, challengers


def _decide(n: _Night, cands: list[Candidate], why_none: str) -> NightDecision:
    """Promote only a confirmed gain; otherwise say what happened."""
    if n.inc_figure is None and n.base_figure is None and not any(c.feasible for c in cands):
        return NightDecision(
            "nothing_feasible", "neither the incumbent, the baseline nor any trial ran feasibly"
        )
    pool, challengers = _challengers(n, cands)
    if pool and pool[0] not in challengers and Path(n.options.out).is_file():  # the best is what is deployed
        return NightDecision(
            "kept",
            f"kept (same config): trial #{pool[0].number}, tonight's best, is the command already "
            f"deployed at {n.options.out}; nothing written, no hook run",
        )
    if not challengers:
        return NightDecision("kept", no_candidate_reason(cands, n.inc_words().args, why_none))
    best = challengers[0]
    others = len([c for c in cands if not c.feasible])
    tail = f"; {others} more did not finish feasibly (pruned, infeasible or failed)" if others else ""
    inc = n.inc_figure["median"] if n.inc_figure else None
    sign = -1.0 if n.maximize else 1.0
    if inc is not None and best.value is not None and sign * best.value >= sign * inc:
        return NightDecision("kept", worse_reason(best, len(challengers), n.metric, inc) + tail)
    if not n.room_to_confirm():
        return NightDecision(
            "kept",
            f"not confirmed: trial #{best.number} looked better ({n.metric} {figure_text(best.value, n.metric)}) but the "
            f"promotion check (2 runs at least) no longer fit in the budget",
        )
    return _confirm(n, best)


def _confirm(n: _Night, best: Candidate) -> NightDecision:
    config = EngineConfig.recorded(best.args, best.env)
    rounds = n.confirm_rounds()
    n.say(f"night {n.number}: trial #{best.number} against {n.inc_label}, {rounds} round(s) each")
    ab = compare_configs(
        n.evaluator("promotion"),
        [(n.inc_label, n.inc_config), (f"trial {best.number}", config)],
        rounds=rounds,
        on_run=lambda name, r, rec: n.on_run("promotion", name, r, rec),
        extra_figures=(n.metric,),
    )
    floor = max(n.options.min_improvement, n.band.value or 0.0)
    ok, why = significant_gain(ab, n.metric, maximize=n.maximize, min_improvement=floor)
    if ok and any(not r.ok or (r.figures and r.figures.failed) for r in ab.b.runs):
        ok, why = False, why + "; but a re-measured run failed requests"
    if not ok:
        return NightDecision("kept", f"not confirmed: trial #{best.number} {why}")
    _promote(n.study, n.study.trials[best.number], n.options.out, n.number)
    n.inc_config = EngineConfig.recorded(config_to_args(n.options.out)[1])  # as tomorrow reads it
    n.inc_params = dict(best.params)
    n.inc_figure = figure_of(list(ab.b.runs), n.metric)
    n.inc_label = f"promoted trial #{best.number}"
    return NightDecision("promoted", why, best.number)


def _verdict(n: _Night) -> tuple[bool, str]:
    """The regression verdict against the incumbent's last figure; the noise pooled over the runs
    of this command on up to 5 earlier nights and tonight's baseline arm."""
    if n.previous is None:
        return n.inc_figure is None, "first night: nothing to compare with"
    args = list(n.inc_words().args)
    same = [p for p in nights(n.study) if p.incumbent_args == args and p.incumbent_figure]
    last_fig = n.previous.incumbent_figure if n.previous.incumbent_args == args else None
    more = [list(p.incumbent_figure.get("runs") or []) for p in same[-6:-1] if p.incumbent_figure]
    base_now = None if n.one_arm else n.base_figure
    if n.drift and n.inc_figure is not None and last_fig is not None:  # not last night's traffic
        base_last = n.previous.baseline_figure
        if base_now is None or not base_last:
            return False, (
                "not compared: the workload changed and tonight's figure cannot be set against a "
                "baseline measured beside it both nights; it is the reference from tonight on"
            )
        return regression_against_baseline(
            n.maximize, n.inc_figure, base_now, last_fig, base_last, n.options.min_improvement, more
        )
    if base_now is not None:
        more.append(list(base_now.get("runs") or []))
    return regression(n.maximize, n.inc_figure, last_fig, n.options.min_improvement, more)


class NightSteps(Protocol):
    """A night's steps for its engines: one engine's (:func:`engine_night`) or a group's."""

    def remeasure(self) -> None:
        """The incumbent and the baseline, alternately, ``rounds`` times."""

    def verdict(self) -> tuple[bool, str]:
        """(regression, why)."""

    def search(self) -> str:
        """The warm-started search, while the budget holds the promotion check; '' when it
        started, else why it did not."""

    def decide(self, why_none: str) -> NightDecision:
        """Tonight's best against the incumbent: promoted only when the gain is confirmed."""

    def record(self, verdict: tuple[bool, str], decision: NightDecision, why_none: str) -> NightRecord:
        """What the night did, as the study keeps it."""


def run_night(steps: NightSteps, study: optuna.Study) -> NightRecord:
    """One night of N >= 1 engines (the module's doc); its record is kept in ``study``."""
    steps.remeasure()
    verdict = steps.verdict()
    why_none = steps.search()
    record = steps.record(verdict, steps.decide(why_none), why_none)
    save_night(study, record)
    return record


@dataclass
class _OneEngine:
    """One engine's night (N = 1, no split): the steps of this module over tonight's state."""

    n: _Night
    cands: list[Candidate] = field(default_factory=list)

    def remeasure(self) -> None:
        remeasure(self.n)

    def verdict(self) -> tuple[bool, str]:
        return _verdict(self.n)

    def search(self) -> str:
        return _search(self.n)

    def decide(self, why_none: str) -> NightDecision:
        self.cands = candidates_of(self.n.study, self.n.number)
        return _decide(self.n, self.cands, why_none)

    def record(self, verdict: tuple[bool, str], decision: NightDecision, why_none: str) -> NightRecord:
        return _record(self.n, self.cands, verdict, decision, why_none)


def engine_night(
    setup: TuningSetup,
    study: optuna.Study,
    sdir: Path,
    options: NightOptions,
    *,
    say: Callable[[str], None] = lambda line: None,
) -> NightSteps:
    """One engine's night: the plan printed first, then what changed since the last night."""
    return _OneEngine(begin_night(setup, study, sdir, options, say))


def _record(
    n: _Night, cands: list[Candidate], verdict: tuple[bool, str], decision: NightDecision, why_none: str
) -> NightRecord:
    sign = -1.0 if n.maximize else 1.0
    top = [c.params for c in sorted((c for c in cands if c.feasible), key=lambda c: sign * (c.value or 0.0))]
    return NightRecord(
        number=n.number,
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        fingerprints=n.fp,
        changes=n.changes,
        metric=n.metric,
        baseline_figure=n.base_figure,
        incumbent_label=n.inc_label,
        incumbent_args=list(n.inc_words().args),
        incumbent_env=dict(n.inc_words().env),
        incumbent_params=n.inc_params,
        incumbent_figure=n.inc_figure,
        noise_band=n.band.value,
        band_source=n.band.source,
        regression=verdict[0],
        regression_reason=verdict[1],
        decision=decision.decision,
        reason=decision.reason,
        promoted_trial=decision.promoted,
        trials=len(cands),
        top_params=[p for p in top if p][: n.options.top_k],
        duration_s=n.clock.elapsed(),
        budget_s=n.options.budget_s,
        export=str(n.options.out) if decision.promoted is not None else None,
        plan=n.plan.as_dict(),
        runs=n.runs,
        candidates=[c.as_dict() for c in cands],
        run_costs=list(n.clock.run_costs),
        workload_changes=n.drift,
        budget_needed_s=_budget_needed(n, cands, decision, why_none),
    )


def _budget_needed(n: _Night, cands: list[Candidate], decision: NightDecision, why_none: str) -> float | None:
    """The budget tonight's plan needs, when the budget let no candidate run (exit 8); else None.

    At tonight's measured cost of a run: one round of the re-measurement, MIN_CANDIDATES candidates
    and the promotion check, plus what tonight spent outside engine runs (set-up, reports)."""
    if not n.plan.search or decision.decision != "kept" or n.search_stop:
        return None
    if why_none and not why_none.startswith("the re-measurement took"):
        return None
    if any(list(c.args) != list(n.inc_words().args) and not c.baseline for c in cands):
        return None  # a candidate ran: the budget held one
    if n.options.max_trials is not None and len(cands) >= n.options.max_trials:
        return None
    per_run = n.clock.per_run()
    plan = make_plan(n.options.budget_s, [per_run], arms=n.plan.arms, rounds=1, search=True)
    outside = max(n.clock.elapsed() - sum(n.clock.run_costs), 0.0)
    return plan.smallest_budget_s + outside


def _promote(study: optuna.Study, trial: optuna.trial.FrozenTrial, out: Path, night: int) -> None:
    """Write the new export atomically and keep it in history/ (what `nightly rollback` restores); an
    export from before the archive existed is archived first, so the first rollback finds it."""
    out, archive = Path(out), Path(out).parent / "history"
    if out.exists() and not promoted_history(out, archive):
        keep_promoted(out, archive)
    export_best(study, out=out, trial=trial)
    keep_promoted(out, archive)
