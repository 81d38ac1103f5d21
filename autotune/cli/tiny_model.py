"""``autotune tiny-model``: a tiny random-weight Llama for the CPU build of vLLM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._console import out

__all__ = ["tiny_model"]


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
