"""A group study's end: the best group re-measured against the baseline group, then exported.

Confirmation (as for one engine, ``tuning/_confirm.py``, whose gain verdict it shares): the baseline
group and the best group run alternately, A B A B, ``rounds`` times each, every engine of a group
started as in a trial. Engines that share a machine move each other's figures (on the H200 the equal
split varied 2x run to run, against one engine's 3%), so each model is held against the noise its
own runs show: the larger of ``min_improvement`` and the spread (max-min over the median) of its
runs in either arm. The best group is confirmed when the group's objective on the models' medians
(each model's median against its own median in the baseline group, folded as the study folds them)
is below 1.0, at least one model gains beyond its noise (median gain, and with two or more rounds
every run of it ahead of every baseline run), and no model is worse than its baseline beyond its
noise. A group not confirmed is not exported as the best: the baseline group is, and the summary
says why, naming each model's noise.

Export: one ``vllm serve --config`` YAML per model (``NAME.yaml``, the command it was measured with:
its share of the budget and its own configuration) into the ``out`` folder, each checked by the
installed vLLM's own parser before anything is written, plus ``launch.sh``, which starts the group as
it was measured (each engine its own port, from ``base_port`` up, and on the CPU build its own cores;
engines that share a GPU one at a time, each once the one before it answers ``/health``, as a trial
starts them: vLLM sizes its KV cache from the memory it sees used while it profiles). Another
``export_format`` adds its one file for the whole group (``helm-values``: ``values.yaml``, one
modelSpec per model); the per-model files stay, as a group night re-measures them.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import ExportError
from autotune.export import (
    ExportedConfig,
    build_export,
    exporter_for,
    measured_engine_argv,
    measured_launcher,
    write_export,
    write_text,
)
from autotune.study import GroupMode, ModelOutcome, fold_group, member_params, model_ratio, worse_beyond_noise
from autotune.trial import ArmSummary, Comparison
from autotune.tuning._confirm import ArmVerdict, Noise, judge_gain, run_noise
from autotune.tuning.group._setup import GroupModel, GroupSetup
from autotune.tuning.group._trial import GroupEvaluator, GroupTrialResult

__all__ = [
    "GroupConfirmation",
    "GroupExport",
    "baseline_group_trial",
    "best_group_trial",
    "confirm_group",
    "export_group",
]

BASE_PORT = 8000
_ENV_KEPT = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES")


def best_group_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    """The measured group trial with the lowest group objective (the baseline group scores 1.0)."""
    done = [t for t in study.get_trials(deepcopy=False) if t.value is not None]
    return min(done, key=lambda t: float(t.value or 0.0), default=None)


def baseline_group_trial(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    return next(
        (t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("group_trial") == "baseline"), None
    )


# launch.sh on a shared GPU: the next engine starts once this one answers /health (or the group stops)
def _up(python: str) -> list[str]:
    return [
        "# engines that share a GPU start one at a time: vLLM sizes its KV cache from the memory it sees",
        "# used while it profiles, and an engine loading beside it would be counted against it",
        "up() {  # PORT PID NAME",
        f"  until {shlex.quote(python)} -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \\",
        '      "http://127.0.0.1:$1/health" 2>/dev/null; do',
        '    kill -0 "$2" 2>/dev/null || { echo "launch.sh: $3 exited before it was healthy" >&2; kill 0; exit 1; }',
        "    sleep 2",
        "  done",
        "}",
    ]


@dataclass(frozen=True)
class GroupConfirmation:
    """The A B A B re-measurement of the best group against the baseline group."""

    confirmed: bool
    why: str
    ratios: Mapping[str, float]  # each model's median against its baseline median (lower is better)
    value: float | None  # the group's objective on the medians
    noise: Mapping[str, float] = field(default_factory=dict)  # each model's noise, from its own runs


def _values(trial: optuna.trial.FrozenTrial, setup: GroupSetup) -> dict[str, dict[str, Any]]:
    return {m.name: member_params(trial.params, m.name) for m in setup.models}


def _ran(base: GroupTrialResult, cand: GroupTrialResult) -> GroupTrialResult | None:
    """The round's run that failed (None: both measured). A best group only worse than this round's
    baseline (beyond the floor, or below a model's throughput floor) has not failed: the rounds'
    medians, against each model's own spread, judge that."""
    if not base.ok:
        return base
    return None if cand.ok or (cand.measured and not cand.score.broken) else cand


def _ab_rounds(
    evaluate: GroupEvaluator,
    arms: Sequence[tuple[str, optuna.trial.FrozenTrial]],
    setup: GroupSetup,
    rounds: int,
    first_number: int,
    on_run: Callable[[str, int, GroupTrialResult], None] | None,
) -> tuple[list[GroupTrialResult], list[GroupTrialResult], str | None]:
    """The baseline arm and the best arm run alternately, ``rounds`` times each; why a run failed."""
    runs: tuple[list[GroupTrialResult], list[GroupTrialResult]] = ([], [])
    for r in range(rounds):
        for i, (label, trial) in enumerate(arms):
            against = runs[0][-1] if i else None
            res = evaluate(
                first_number + 2 * r + i, dict(trial.user_attrs["split"]), _values(trial, setup), against
            )
            runs[i].append(res)
            if on_run is not None:
                on_run(label, r, res)
        failed = _ran(runs[0][-1], runs[1][-1])
        if failed is not None:
            return runs[0], runs[1], failed.reason
    return runs[0], runs[1], None


def _model_comparison(
    name: str, metric: str, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult]
) -> Comparison:
    def arm(label: str, results: Sequence[GroupTrialResult]) -> ArmSummary:
        values = [v for res in results if (v := res.figures(name, metric)) is not None]
        return ArmSummary(label, (), tuple(res.records[name] for res in results), {metric: values})

    return Comparison(a=arm("baseline", base), b=arm("best", cand))


def _model_verdict(
    m: GroupModel, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult], floor: float
) -> tuple[ModelOutcome, Noise, ArmVerdict]:
    """One model's medians in both arms, the noise its own runs show, and whether it gains beyond it."""
    metric, maximize = m.setup.objective.metric, m.setup.objective.direction == "maximize"
    comp = _model_comparison(m.name, metric, base, cand)
    noise = run_noise(comp.a.figures[metric], comp.b.figures[metric], floor)
    outcome = ModelOutcome(m.name, comp.b.median(metric), comp.a.median(metric), m.weight, metric=metric)
    return outcome, noise, judge_gain(comp, metric, maximize=maximize, noise=noise.value, capacity=False)


def _throughput_short(
    m: GroupModel, base: Sequence[GroupTrialResult], cand: Sequence[GroupTrialResult], floor: float
) -> str | None:
    """Why a model's median throughput falls below its floor (``min_throughput_ratio`` of its baseline
    median) beyond the spread of its own runs (None: it holds)."""
    comp = _model_comparison(m.name, "output_throughput", base, cand)
    a, b = comp.a.median("output_throughput"), comp.b.median("output_throughput")
    if not a or b is None:
        return None
    noise = run_noise(comp.a.figures["output_throughput"], comp.b.figures["output_throughput"], floor)
    need = m.setup.objective.min_throughput_ratio
    if b / a >= need * (1 - noise.value):
        return None
    return f"{m.name} output throughput {b / a:.2f}x its baseline, below its {need:.0%} floor beyond its {noise.text()}"


def _group_verdict(
    setup: GroupSetup,
    mode: GroupMode,
    base: Sequence[GroupTrialResult],
    cand: Sequence[GroupTrialResult],
    floor: float,
) -> GroupConfirmation:
    """Each model's median against its baseline median, held against the noise its own runs show;
    the group confirmed when the group objective on the medians is below 1.0, at least one model
    gains beyond its noise (ranges apart) and none is worse beyond it."""
    direction = setup.models[0].setup.objective.direction
    parts = {m.name: _model_verdict(m, base, cand, floor) for m in setup.models}
    ratios = {n: r for n, (o, _, _) in parts.items() if (r := model_ratio(o, direction)) is not None}
    noise = {n: p[1] for n, p in parts.items()}
    gains = [f"{n} {v.why}" for n, (_, _, v) in parts.items() if v.ok]
    worse = [
        why.removeprefix("infeasible: ")
        for n, r in ratios.items()
        if (why := worse_beyond_noise(n, parts[n][0].metric, r, noise[n].value, direction, "noise"))
    ]
    worse += [why for m in setup.models if (why := _throughput_short(m, base, cand, floor))]
    weights = {m.name: m.weight for m in setup.models}
    value = fold_group(ratios, weights, mode) if len(ratios) == len(parts) else None
    return _confirmation(value, ratios, noise, gains, worse, len(base))


def _confirmation(
    value: float | None,
    ratios: Mapping[str, float],
    noise: Mapping[str, Noise],
    gains: Sequence[str],
    worse: Sequence[str],
    rounds: int,
) -> GroupConfirmation:
    bands = {n: v.value for n, v in noise.items()}
    if value is None:
        return GroupConfirmation(False, "no figure for every model: not confirmed", ratios, None, bands)
    ok = value < 1.0 and bool(gains) and not worse
    shown = ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
    source = ", ".join(f"{k} {v.text()}" for k, v in noise.items())
    why = (
        f"group objective {value:.3f} on the medians ({shown}); each model held against the noise of its "
        f"own {rounds}+{rounds} A B runs on the shared machine, not the one-engine floor alone ({source})"
        + (f"; gains: {'; '.join(gains)}" if gains else "; no model gains beyond its noise")
        + (f"; worse beyond the noise: {', '.join(worse)}" if worse else "")
        + ("" if ok else ": not confirmed")
    )
    return GroupConfirmation(ok, why, ratios, value, bands)


def confirm_group(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    baseline: optuna.trial.FrozenTrial,
    best: optuna.trial.FrozenTrial,
    *,
    rounds: int,
    min_improvement: float,
    first_number: int,
    on_run: Callable[[str, int, GroupTrialResult], None] | None = None,
    base_label: str = "baseline group",
) -> GroupConfirmation:
    """Re-measure ``best`` against ``baseline`` (module docstring); numbers from ``first_number``.
    ``baseline`` may be any group trial of the study (a night's incumbent, ``base_label``): its
    split and its own parameters are what run."""
    arms = ((base_label, baseline), (f"trial {best.number}", best))
    base, cand, failed = _ab_rounds(evaluate, arms, setup, rounds, first_number, on_run)
    if failed is not None:
        return GroupConfirmation(False, f"a re-measurement failed ({failed}): not confirmed", {}, None)
    return _group_verdict(setup, evaluate.mode or "pareto", base, cand, min_improvement)


@dataclass(frozen=True)
class GroupExport:
    """What was written: each model's YAML and the launch script (and the group's file of another
    export format, e.g. Helm values)."""

    configs: Mapping[str, Path]
    launch: Path
    group_file: Path | None = None
    deploy: str | None = None  # the command that deploys group_file


def _model_export(
    setup: GroupSetup, trial: optuna.trial.FrozenTrial, name: str, header: Sequence[str], engine: str | None
) -> ExportedConfig:
    attrs = trial.user_attrs.get(f"model:{name}") or {}
    command = attrs.get("command") or []
    if not command:
        raise ExportError(f"trial {trial.number}: model {name} stored no command to export")
    model, flags = measured_engine_argv(command)
    if os.path.exists(os.path.expanduser(model)):
        model = os.path.abspath(os.path.expanduser(model))
    exported = build_export(
        model=model,
        fixed_argv=flags,
        tuned_argv=[],
        env={},
        header_lines=[*header, f"model {name} of the group, share {trial.user_attrs['split'][name]:.3f}"],
        launcher=measured_launcher(command),
        engine=engine,
    )
    checker = next(m for m in setup.models if m.name == name).setup.checker()
    if checker is not None:
        error = checker.check(["--model", model, *flags]).error
        if error:
            raise ExportError(
                f"vLLM's parser rejects model {name}'s exported config: {error}; nothing was written"
            )
    return exported


def export_group(
    setup: GroupSetup,
    evaluate: GroupEvaluator,
    trial: optuna.trial.FrozenTrial,
    out_dir: Path,
    header: Sequence[str],
    *,
    base_port: int = BASE_PORT,
    export_format: str = "vllm-config",
) -> GroupExport:
    """``NAME.yaml`` per model and ``launch.sh`` into ``out_dir``, and ``export_format``'s group file
    (module docstring); every model is checked, and the group file rendered, before the first file
    is written."""
    exporter = exporter_for(export_format)
    exports = {
        m.name: _model_export(setup, trial, m.name, header, evaluate.evaluators[m.name].engine_label)
        for m in setup.models
    }
    group_text = exporter.render(exports) if exporter.group_file else None
    paths: dict[str, Path] = {}
    lines = [
        "#!/bin/sh",
        f"# The group as vllm-autotune measured it (trial {trial.number}): one vLLM per model, each its",
        "# own port; Ctrl-C or SIGTERM stops them all.",
        *(f"# {h}" for h in header),
        "set -eu",
        'cd "$(dirname "$0")"',
        "trap 'kill 0' INT TERM",
    ]
    one_at_a_time = evaluate.one_at_a_time
    if one_at_a_time:
        first = shlex.split(exports[setup.models[0].name].deploy_command("x.yaml"))[0]
        lines += _up(first if "python" in Path(first).name else "python3")
    for i, m in enumerate(setup.models):
        path = Path(out_dir) / f"{m.name}.yaml"
        write_export(exports[m.name], path)
        paths[m.name] = path
        env = {k: v for k, v in evaluate.evaluators[m.name].spec.env.items() if k in _ENV_KEPT}
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        run = exports[m.name].deploy_command(path.name) + f" --port {base_port + i}"
        lines.append(f"{prefix + ' ' if prefix else ''}{run} &  # {m.name}")
        if one_at_a_time and i + 1 < len(setup.models):
            lines.append(f"up {base_port + i} $! {shlex.quote(m.name)}")
    lines.append("wait")
    launch = Path(out_dir) / "launch.sh"
    fd, tmp = tempfile.mkstemp(prefix=".launch.sh.", dir=out_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o755)
    os.replace(tmp, launch)
    if not exporter.group_file or group_text is None:
        return GroupExport(paths, launch)
    group_file = Path(out_dir) / exporter.group_file
    write_text(group_file, group_text)
    deploy = exporter.deploy_command(exports[setup.models[0].name], group_file)
    return GroupExport(paths, launch, group_file, deploy)
