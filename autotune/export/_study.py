"""Export a study's trial exactly as it was measured: the stored command, fixed flags included.

The export reads the study and never writes to it. The YAML is rebuilt from the trial's stored
command line (not from today's options), and checked against it flag by flag before writing.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml

from autotune.engine import command_launcher, command_model_and_flags, model_args
from autotune.errors import ExportError
from autotune.export._seam import exporter_for
from autotune.export._yaml import ExportedConfig, build_export, canonical_flags, config_to_argv, write_text
from autotune.study import (
    TrialRecord,
    baseline_trial,
    baseline_what,
    best_feasible,
    failure_summary,
    figure_text,
    read_record,
)

__all__ = [
    "Measured",
    "export_best",
    "export_measured",
    "exports_the_same",
    "measured_engine_argv",
    "measured_launcher",
]


def measured_engine_argv(command: Sequence[str]) -> tuple[str, list[str]]:
    """(model, engine flags) of a stored trial command (the engine reads it, see
    :func:`~autotune.engine.command_model_and_flags`); the per-trial ``--host``/``--port`` dropped."""
    model, head, kept = command_model_and_flags(command)
    if model is None:
        if len(head) < 3:
            raise ExportError(f"cannot find the model in the stored command {' '.join(command)!r}")
        model = head[-1]
    return model, [tok for n, v in kept for tok in ((n,) if v is None else (n, v))]


def measured_launcher(command: Sequence[str]) -> tuple[str, ...]:
    """How a stored trial command started the engine (``("vllm", "serve")``, or the API server's module)."""
    return command_launcher(command)


def absolute_model(model: str) -> str:
    """A local model path as an absolute one (an export is read from anywhere); a hub id such as
    ``Qwen/Qwen2.5-7B`` that names no local path stays as it is."""
    return os.path.abspath(os.path.expanduser(model)) if os.path.exists(os.path.expanduser(model)) else model


def exports_the_same(trial: optuna.trial.FrozenTrial, path: Path) -> bool:
    """Would exporting ``trial`` write the engine command already in ``path`` (header comments and the
    model's path aside)? False when ``path`` is missing or unreadable."""
    rec = read_record(trial)
    try:
        data = yaml.safe_load(Path(path).read_text()) if rec.command else None
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(data, dict):
        return False
    data.pop("model", None)
    return canonical_flags(measured_engine_argv(rec.command)[1]) == canonical_flags(config_to_argv(data))


def _header(study: optuna.Study, best: optuna.trial.FrozenTrial, rec: TrialRecord) -> list[str]:
    metric = study.user_attrs.get("objective", "objective")
    lines = [
        f"vLLM configuration exported by vllm-autotune on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}",
        f"study {study.study_name!r}, trial {best.number}"
        + (" (the baseline was best)" if rec.baseline else "")
        + (f"; engine {rec.engine}" if rec.engine else ""),
        f"{metric}: {figure_text(best.value, metric)}",
    ]
    if metric == "capacity":
        lines += capacity_lines(study, best, rec)
    base = baseline_trial(study)
    if base is None:
        lines.append(
            "WARNING: no baseline was measured in this study, so its gain over vLLM's defaults is unknown"
        )
    elif base.value is not None:
        brec = read_record(base)
        what = (
            f"reference {brec.reference}: vLLM's defaults do not fit here"
            if brec.reference
            else baseline_what(study)
        )
        lines.append(f"baseline ({what}; trial {base.number}) {metric}: {figure_text(base.value, metric)}")
    if rec.figures is not None:
        f = rec.figures
        lines.append(
            f"output throughput: {f.output_throughput:.1f} tok/s, completed {f.completed} requests, "
            f"failed {f.failed}"
        )
    if rec.saturated and rec.figures is not None:
        lines.append(f"WARNING: {rec.figures.saturation_note}")
    fc = rec.forecast
    if fc.get("predicted_ms") is not None and fc.get("verdict") != "veto" and best.value is not None:
        lo, hi = fc.get("interval_ms") or (float("nan"), float("nan"))
        lines.append(
            f"predicted before its start (latency model): {fc.get('metric', metric)} {fc['predicted_ms']:.1f} ms "
            f"[{lo:.1f}-{hi:.1f}]; measured {figure_text(best.value, metric)} "
            f"({best.value / fc['predicted_ms'] - 1:+.0%})"
        )
    return lines


def _range(values: Sequence[float]) -> str:
    return f"[{min(values):.3g}-{max(values):.3g}]"


def capacity_lines(study: optuna.Study, best: optuna.trial.FrozenTrial, rec: TrialRecord) -> list[str]:
    """``capacity at SLO ttft_p90<=800ms: 14.2 req/s [13.1-14.9] (defaults 7.9 req/s [7.4-8.3], 1.80x)``:
    the median over the confirmation's runs (each a full bracket) with their range, else the trial's
    own bracket [held-broke]; then what the brackets are."""
    raw = rec.figures.as_dict() if rec.figures is not None else {}
    slos = ", ".join(f"{k}<={v:g}ms" for k, v in (raw.get("capacity_slos") or {}).items()) or "?"
    base = baseline_trial(study)
    brec = read_record(base) if base is not None else None
    a_vals, b_vals = _confirmed_capacities(study, best)
    what = (
        "defaults"
        if brec is None or not (brec.reference or baseline_what(study) != "vLLM defaults")
        else "baseline"
    )
    if a_vals and b_vals:
        ma, mb = statistics.median(a_vals), statistics.median(b_vals)
        ratio = f", {mb / ma:.2f}x" if ma > 0 else ": even its lowest level broke the SLO"
        return [
            f"capacity at SLO {slos}: {mb:.3g} req/s {_range(b_vals)} ({what} {ma:.3g} req/s {_range(a_vals)}{ratio})",
            f"(median [range] of the confirmation's {len(b_vals)} and {len(a_vals)} runs, each a full bracket: "
            "the highest load that held its SLOs)",
        ]
    held, bheld = raw.get("capacity"), (brec.figures.get("capacity") if brec and brec.figures else None)
    ratio = f", {held / bheld:.2f}x" if held and bheld else ""
    return [
        f"capacity at SLO {slos}: {_bracket(rec)} ({what} {_bracket(brec)}{ratio})",
        "(each [held-broke]: the highest load that held its SLOs and the lowest above it that broke them)",
    ]


def _confirmed_capacities(
    study: optuna.Study, best: optuna.trial.FrozenTrial
) -> tuple[list[float], list[float]]:
    """The capacities the confirmation of ``best`` measured: (the baseline's runs, the best's runs)."""
    conf = study.user_attrs.get(f"confirmation_{best.number}") or {}
    comp = conf.get("comparison") or {}
    a_vals = ((comp.get("a") or {}).get("values") or {}).get("capacity") or []
    b_vals = ((comp.get("b") or {}).get("values") or {}).get("capacity") or []
    return a_vals, b_vals


def _bracket(r: TrialRecord | None) -> str:
    """A trial's capacity bracket: ``14.2 req/s [14.2-15.9]`` (held, then broke; ``?``: none broke)."""
    f = r.figures.as_dict() if r is not None and r.figures is not None else {}
    held, broke = f.get("capacity"), f.get("capacity_hi")
    if held is None:
        return "-"
    return (
        f"{held:.3g} req/s [{held:.3g}-{broke:.3g}]"
        if broke is not None
        else f"{held:.3g} req/s [{held:.3g}-?]"
    )


def export_best(
    study: optuna.Study,
    *,
    out: Path | None,
    trial: optuna.trial.FrozenTrial | None = None,
    model: str | None = None,
    check: Callable[[Sequence[str]], str | None] | None = None,
    notes: Sequence[str] = (),
    export_format: str = "vllm-config",
) -> tuple[optuna.trial.FrozenTrial, ExportedConfig]:
    """Export ``trial`` (default: the best feasible one) as it was measured.

    ``model``: write this model instead of the measured one (a path that differs on the serving
    host; the measured one is written absolute when it is a local path). ``check``: the engine's own
    parser (returns an error or None), asked before writing. ``notes``: more header lines (why the
    study's best was passed over, what got worse than the baseline). ``export_format``: what ``out``
    is (:func:`autotune.export.exporter_for`), the engine named after its model.
    """
    exporter = exporter_for(export_format)  # a bad format is said before the study is read
    best = trial or best_feasible(study)
    if best is None:
        raise ExportError(
            f"study {study.study_name!r} has no feasible trial to export: {failure_summary(study) or 'no trial'}"
        )
    rec = read_record(best)
    if not rec.command:
        raise ExportError(f"trial {best.number} of study {study.study_name!r} stored no command to export")
    exported = export_measured(
        rec.command,
        Measured(best.number, "the exported config", rec.engine, rec.rendered_env, _rss_peak(rec)),
        header=[*_header(study, best, rec), *notes],
        model=model,
        check=check,
    )
    text = exporter.render({os.path.basename(str(exported.config["model"])) or "model": exported})
    if out is not None:
        write_text(out, text)
    return best, exported


@dataclass(frozen=True)
class Measured:
    """What a measured engine's export says of it: its trial, how errors name it, the engine that
    served it, the environment it ran with and its peak host memory (None: not sampled)."""

    trial: int
    label: str  # "the exported config", "model chat's exported config"
    engine: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    host_peak_bytes: int | None = None


def export_measured(
    command: Sequence[str],
    measured: Measured,
    *,
    header: Sequence[str],
    model: str | None = None,
    check: Callable[[Sequence[str]], str | None] | None = None,
) -> ExportedConfig:
    """One engine's export, as it was measured (one engine of a study, or of a group): its stored
    ``command``'s model (``model`` instead, when given; a local path made absolute) and flags, with
    ``header``. Checked before anything is written: read back, its flags are the measured ones, and
    the engine's own parser (``check``: an error or None) takes them. Nothing is written here."""
    measured_model, flags = measured_engine_argv(command)
    exported = build_export(
        model=model or absolute_model(measured_model),
        fixed_argv=flags,
        tuned_argv=[],
        env=measured.env,
        header_lines=list(header),
        launcher=measured_launcher(command),
        engine=measured.engine,
        host_peak_bytes=measured.host_peak_bytes,
    )
    written = config_to_argv({k: v for k, v in exported.config.items() if k != "model"})
    if canonical_flags(written) != canonical_flags(flags):
        raise ExportError(
            f"the export of trial {measured.trial} would differ from the measured command "
            f"({' '.join(written)} vs {' '.join(flags)}); nothing was written"
        )
    error = check([*model_args(str(exported.config["model"])), *written]) if check is not None else None
    if error:
        raise ExportError(f"vLLM's parser rejects {measured.label}: {error}; nothing was written")
    return exported


def _rss_peak(rec: TrialRecord) -> int | None:
    """The engine's peak host memory (its process tree's RSS) as the trial sampled it, if it did."""
    peak = rec.memory.get("rss_peak")
    return peak if isinstance(peak, int) and not isinstance(peak, bool) and peak > 0 else None
