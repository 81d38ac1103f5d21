"""Pick the best feasible trial of a study and export it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import optuna

from autotune.errors import ExportError
from autotune.export._yaml import ExportedConfig, build_export, write_export
from autotune.study import BASELINE_ATTR, baseline_trial, best_feasible

__all__ = ["export_best"]


def export_best(
    study: optuna.Study,
    *,
    model: str,
    fixed_argv: Sequence[str],
    out: Path | None,
    trial: optuna.trial.FrozenTrial | None = None,
) -> tuple[optuna.trial.FrozenTrial, ExportedConfig]:
    """Export ``trial`` (default: the best feasible one)."""
    best = trial or best_feasible(study)
    if best is None:
        raise ExportError(
            f"study {study.study_name!r} has no feasible trial to export "
            "(fix: look at the trial logs, widen the search space or relax --slo/--min-throughput-ratio)"
        )
    metric = study.user_attrs.get("objective", "objective")
    lines = [
        f"vLLM configuration exported by vllm-autotune on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"study {study.study_name!r}, trial {best.number}"
        + (" (the baseline: vLLM's defaults were best)" if best.user_attrs.get(BASELINE_ATTR) else ""),
        f"{metric}: {best.value:.4g}",
    ]
    base = baseline_trial(study)
    if base is not None and base.value is not None and best.value:
        lines.append(f"baseline (vLLM defaults, trial {base.number}) {metric}: {base.value:.4g}")
    figures = best.user_attrs.get("figures") or {}
    if figures:
        lines.append(
            f"output throughput: {figures.get('output_throughput', 0):.1f} tok/s, "
            f"completed {figures.get('completed')} requests, failed {figures.get('failed')}"
        )
    lines.append("deploy: vllm serve --config THIS_FILE")
    exported = build_export(
        model=model,
        fixed_argv=fixed_argv,
        tuned_argv=best.user_attrs.get("rendered_args") or [],
        env=best.user_attrs.get("rendered_env") or {},
        header_lines=lines,
    )
    if out is not None:
        write_export(exported, out)
    return best, exported
