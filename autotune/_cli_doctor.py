"""``autotune doctor``: the machine, the installed vLLM, and what a model needs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli import out

# ruff: noqa: UP045  (typer needs Optional at runtime on Python 3.10)


def doctor(
    model: Annotated[
        Optional[Path],
        typer.Option(help="Model directory (only config.json is needed) for the memory table."),
    ] = None,
    max_model_len: Annotated[Optional[int], typer.Option(help="Request length for max concurrency.")] = None,
) -> None:
    """Print GPU/host/swap/shared-memory facts, the installed vLLM build, and a model's memory table."""
    from autotune.memory import doctor_report, installed_vllm_info, read_machine_facts

    facts = read_machine_facts()
    out.print(
        doctor_report(facts, vllm_info=installed_vllm_info(), model_dir=model, max_model_len=max_model_len)
    )
