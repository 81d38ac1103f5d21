"""``autotune export``, ``show`` and ``tiny-model``: commands around an existing study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from autotune._cli_run import _print_table
from autotune.cli import out

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045


def export(
    study: Annotated[str, typer.Option(help="Study name.")],
    model: Annotated[str, typer.Option(help="Model directory or name written into the config.")],
    out_path: Annotated[Path, typer.Option("--out", help="Where to write the YAML.")] = Path("best.yaml"),
    storage: Annotated[Optional[str], typer.Option(help="SQLAlchemy URL (default: the SQLite file).")] = None,
    studies_dir: Annotated[Path, typer.Option(help="Home of study databases.")] = Path("studies"),
    engine_arg: Annotated[
        Optional[list[str]], typer.Option("--engine-arg", help="Fixed flags to include.")
    ] = None,
) -> None:
    """Export the best feasible trial of an existing study as `vllm serve --config` YAML."""
    from autotune.engine import parse_engine_args
    from autotune.export import export_best
    from autotune.study import Objective, load_or_create, resolve_storage_url

    url = resolve_storage_url(storage, study, studies_dir)
    st = _existing_study(url, study)
    fixed = parse_engine_args(engine_arg or [])
    fixed_argv = [tok for n, v in fixed for tok in ([n] if v is None else [n, v])]
    metric = st.user_attrs.get("objective", "ttft_p90")
    st = load_or_create(url, study, Objective(metric=metric), None)
    best, exported = export_best(st, model=model, fixed_argv=fixed_argv, out=out_path)
    out.print(f"best: trial {best.number}; wrote {out_path}")
    out.print(exported.command)


def _existing_study(url: str, name: str) -> Any:
    import optuna

    from autotune.errors import StorageError
    from autotune.study import open_storage

    storage = open_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    if name not in names:
        raise StorageError(f"--study: no study named {name!r} (known: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=name, storage=storage)


def show(
    study: Annotated[str, typer.Option(help="Study name.")],
    storage: Annotated[Optional[str], typer.Option(help="SQLAlchemy URL (default: the SQLite file).")] = None,
    studies_dir: Annotated[Path, typer.Option(help="Home of study databases.")] = Path("studies"),
) -> None:
    """Print a study's trials: parameters, figures, failures."""
    from autotune.study import resolve_storage_url

    url = resolve_storage_url(storage, study, studies_dir)
    st = _existing_study(url, study)
    _print_table(st, st.user_attrs.get("objective", "ttft_p90"))


def tiny_model(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the model to.")],
    layers: Annotated[
        int, typer.Option(min=1, help="Decoder layers (8 KiB of KV per token with 8 layers).")
    ] = 2,
) -> None:
    """Generate a tiny random-weight Llama (a few MB) for the CPU build of vLLM."""
    from autotune.tiny_model import make_tiny_model

    make_tiny_model(out_dir, layers=layers)
    out.print(str(out_dir))
