"""``autotune init``: write a commented study file from what ``doctor`` and ``workload inspect`` find."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._console import out
from autotune.errors import ConfigError

__all__ = ["init"]


def _relative(path: Path, to: Path) -> str:
    """``path`` as the study file will read it: relative to the file's folder (absolute when elsewhere)."""
    try:
        return os.path.relpath(path.resolve(), to.resolve())
    except ValueError:
        return str(path.resolve())


def _found(workload: Path, model: str, block_size: int) -> tuple[list[str], dict[str, Any]]:
    """What the machine and the workload say: comment lines, and the keys they suggest."""
    from autotune.engine import detect_profile, installed_engine
    from autotune.memory import read_machine_facts
    from autotune.workload import inspect_workload, load_tokenizer, load_workload

    facts = read_machine_facts()
    profile = detect_profile()
    engine = installed_engine()
    wl = load_workload(workload)
    tokenizer = load_tokenizer(model) if Path(model).is_dir() else None
    report = inspect_workload(wl, block_size=block_size, tokenizer=tokenizer)
    gpus = ", ".join(f"{g.name} {g.total / 2**30:.0f} GiB" for g in facts.gpus) or "none"
    header = [
        f"written by `autotune init` for {workload} and {model}",
        f"machine: GPUs {gpus}; host memory {facts.host_available / 2**30:.1f} GiB available",
        f"engine: {engine.describe()}; profile {profile.name}",
        f"workload: {report.requests} requests, {report.sessions} sessions, prompt tokens "
        f"{report.prompt_tokens.total:,} ({report.tokenizer}), prefix reuse {report.prefix_reuse:.0%}, working set "
        f"{report.working_set_tokens:,} tokens at block {report.block_size}",
        "every key below is also a flag of run/nightly/worker/compare (--long-name); a flag overrides this file",
    ]
    return header, {"profile": profile.name}


def init(
    workload: Annotated[Path, typer.Option("--workload", "-w", help="The workload (JSONL file or folder).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Model directory or name, as vLLM takes it.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="The study file to write.")] = Path(
        "study.yaml"
    ),
    study: Annotated[str, typer.Option(help="The study's name.")] = "",
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented study file: the workload, the model and the detected profile set, every other key
    at its default with its help; then run it with `autotune run -f FILE`."""
    from autotune.studyfile import commented_study_file

    if out_path.exists() and not force:
        raise ConfigError(f"--out: {out_path} exists (fix: another path, or --force to overwrite it)")
    if not workload.exists():
        raise ConfigError(f"--workload: {workload} does not exist (fix: a workload file or folder)")
    header, found = _found(workload, model, block_size=16)
    model_value = os.path.abspath(model) if Path(model).exists() else model  # a hub id stays as it is
    values = {
        "workload": _relative(workload, out_path.parent),
        "model": model_value,
        "study": study or workload.stem,
        **found,
    }
    text = commented_study_file(values, header)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, out_path)  # never a half-written study file
    out.print(f"wrote {out_path}: run it with `autotune run -f {out_path}` (a flag overrides the file)")
