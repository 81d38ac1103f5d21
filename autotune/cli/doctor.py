"""``autotune doctor``: the machine, the installed vLLM, its engine profile, and what a model needs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from autotune.cli._console import out
from autotune.cli._doctor_tables import doctor_report

if TYPE_CHECKING:
    from autotune.engine import EngineProfile
    from autotune.space import SearchSpace

# ruff: noqa: UP045  (typer needs Optional at runtime on Python 3.10)


def doctor(
    model: Annotated[
        Optional[Path],
        typer.Option(help="Model directory (only config.json is needed) for the memory table."),
    ] = None,
    max_model_len: Annotated[Optional[int], typer.Option(help="Request length for max concurrency.")] = None,
    profile: Annotated[
        Optional[str],
        typer.Option(
            help="Engine profile whose knobs to list: cuda-native, cuda-lmcache, ascend or cpu. "
            "Default: the one detected from the installed vLLM."
        ),
    ] = None,
    space: Annotated[
        Optional[Path], typer.Option(help="Search space to list the knobs of. Default: the profile's.")
    ] = None,
) -> None:
    """Print GPU/host/swap/shared-memory facts, the installed vLLM build, the engine profile's
    knobs (how each tuned parameter reaches vLLM, or why it is not tuned), and a model's memory table."""
    from autotune.engine import build_profile, detect_profile, installed_engine
    from autotune.memory import read_machine_facts
    from autotune.space import load_search_space

    prof = build_profile(profile) if profile else detect_profile()  # a bad name fails before any output
    knob_space = load_search_space(space) if space else None
    facts = read_machine_facts()
    out.print(
        doctor_report(facts, vllm_info=installed_engine(), model_dir=model, max_model_len=max_model_len)
    )
    out.print(profile_report(prof, knob_space))


def profile_report(profile: EngineProfile, space: SearchSpace | None = None) -> RenderableType:
    """The profile's knob table and the stale shared-memory files its pool left behind."""
    from autotune.engine import clean_stale_shm, supported_knobs

    table = Table(
        title=f"Engine profile {profile.name}: {profile.description}",
        title_justify="left",
        show_lines=False,
    )
    table.add_column("knob", style="bold", no_wrap=True)
    table.add_column("how it reaches vLLM")
    for name, how in supported_knobs(profile, space):
        table.add_row(name, Text(how, style="dim") if how.startswith("unsupported:") else how)
    parts: list[RenderableType] = [table]
    if profile.unavailable:
        parts.append(Text(f"offload unavailable here: {profile.unavailable}", style="yellow"))
    elif profile.name == "cuda-lmcache":
        from autotune.engine import lmcache_ops

        ops = lmcache_ops()
        parts.append(Text(ops.warning() or ops.line, style="yellow" if not ops.loads else ""))
    if profile.shm_patterns:
        stale = clean_stale_shm(profile.shm_patterns, dry_run=True)
        line = (
            f"/dev/shm: {len(stale.removed)} stale pool file(s) ({stale.freed_bytes / 2**30:.2f} GiB) "
            f"matching {', '.join(profile.shm_patterns)}, {len(stale.kept_in_use)} in use"
        )
        parts.append(Text(line, style="yellow" if stale.removed else ""))
    return Group(*parts)
