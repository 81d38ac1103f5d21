"""``autotune show`` and ``autotune export``: read an existing study (never write to it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import optuna
import typer

from autotune.cli._console import console, out
from autotune.cli._open import existing_study
from autotune.cli._study_options import ExportFormatOption, Storage, StudiesDir
from autotune.errors import ConfigError, StorageError
from autotune.tuning import GROUP_FINGERPRINT_ATTR
from autotune.usecases import group_table, study_table

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["export", "show"]


def export(
    study: Annotated[str, typer.Option(help="Study name.")],
    out_path: Annotated[Path, typer.Option("--out", help="Where to write the YAML.")] = Path("best.yaml"),
    export_format: ExportFormatOption = "vllm-config",
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Write this model path instead of the measured one (e.g. where the serving host keeps it)."
        ),
    ] = None,
    trial: Annotated[
        Optional[int], typer.Option(help="Export this trial number (default: the best feasible).")
    ] = None,
    storage: Storage = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Export a study's best feasible trial as `vllm serve --config` YAML (or production-stack Helm values,
    --export-format helm-values): exactly the command that was measured (fixed flags included). The study
    is not modified."""
    from autotune.export import export_best, exporter_for
    from autotune.study import choose_export, export_costs

    exporter = exporter_for(export_format)  # a bad format is said before the study is opened
    st = existing_study(storage, study, studies_dir)
    if GROUP_FINGERPRINT_ATTR in st.user_attrs:  # a group study
        raise ConfigError(
            f"--study {study}: a group study (several models on one server) is exported by `autotune run -f "
            "GROUP.yaml`: one YAML per model and a launch file, each checked by vLLM's parser (fix: `autotune "
            f"run -f GROUP.yaml --study {study} --n-trials 0 --out DIR`, which confirms and exports what it holds)"
        )
    metric = str(st.user_attrs.get("objective", "ttft_p90"))
    notes: list[str] = []
    chosen: optuna.trial.FrozenTrial | None
    if trial is not None:
        found = [t for t in st.get_trials(deepcopy=False) if t.number == trial]
        if not found:
            raise StorageError(f"--trial: study {study!r} has no trial {trial}")
        chosen = found[0]
    else:  # as `run` exports: a best whose figure alone is doubtful is passed over
        choice = choose_export(st, metric)
        done = st.user_attrs.get(f"confirmation_{choice.trial.number}") if choice.trial is not None else None
        then = (
            "and its re-measurement against the baseline confirmed it"
            if isinstance(done, dict) and done.get("confirmed")
            else "and it was not re-measured: it is exported on that figure alone (fix: `autotune compare`)"
        )
        chosen, notes = choice.trial, choice.lines(metric, then)
    costs = export_costs(st, chosen, metric) if chosen is not None else None
    notes += [costs] if costs else []
    best, exported = export_best(
        st, out=out_path, trial=chosen, model=model, notes=notes, export_format=export_format
    )
    out.print(f"trial {best.number}; wrote {out_path}")
    for line in notes:
        out.print(line, soft_wrap=True)
    out.print(f"deploy: {exporter.deploy_command(exported, out_path)}", soft_wrap=True)
    out.print(exported.command, soft_wrap=True)


def show(
    study: Annotated[str, typer.Option(help="Study name.")],
    storage: Storage = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Print a study's trials: configuration, figures, hit rates, memory, failures. A group study's:
    each trial's split, group objective and every model's figure and ratio."""
    st = existing_study(storage, study, studies_dir)
    if GROUP_FINGERPRINT_ATTR in st.user_attrs:  # a group study
        from autotune.report import group_view  # plotly: only for a group study's table

        console.print(group_table(group_view(st)))
        return
    console.print(study_table(st, st.user_attrs.get("objective", "ttft_p90")))
    effective = st.user_attrs.get("study_spec")
    if isinstance(effective, dict):
        import yaml

        fingerprint = st.user_attrs.get("study_fingerprint", "?")
        shown = {k: v for k, v in effective.items() if v not in (None, [], ())}
        out.print(
            f"# the effective study of its latest run (fingerprint {fingerprint}); `autotune run -f` reads it"
        )
        out.print(yaml.safe_dump(shown, sort_keys=False).rstrip(), soft_wrap=True, markup=False)
