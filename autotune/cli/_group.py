"""``autotune run -f group.yaml``: a study of several models on one server (``models:``, ``share:``);
the use case is :func:`autotune.usecases.run_group`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer

from autotune import usecases
from autotune.cli._console import ConsoleReporter
from autotune.studyfile import GroupFile

__all__ = ["run_group"]


def run_group(group: GroupFile, flags: Mapping[str, Any]) -> None:
    """The group study of ``group`` (flags as given on the command line, applied to every model)."""
    raise typer.Exit(usecases.run_group(group, flags, ConsoleReporter()).exit_code)
