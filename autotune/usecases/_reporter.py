"""The seam between a use case and whoever shows its words: a use case never prints. It hands each
line (rich markup unless ``markup=False``) or table to a :class:`Reporter`: ``say`` for progress and
warnings (the CLI: standard error), ``show`` for the result (the CLI: standard output)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.console import RenderableType

__all__ = ["Reporter", "Transcript", "TwoStreams"]


class Reporter(Protocol):
    """What a use case says, in the order it happens (a study takes hours: its lines cannot wait)."""

    def say(
        self,
        text: RenderableType,
        *,
        style: str | None = None,
        markup: bool | None = None,
        soft_wrap: bool = False,
    ) -> None:
        """Progress, a warning, a verdict on the way: not the result."""

    def show(
        self,
        text: RenderableType,
        *,
        style: str | None = None,
        markup: bool | None = None,
        soft_wrap: bool = False,
    ) -> None:
        """The result: what a script reads (the export's path, the figures, a night's summary)."""

    def log_to(self, path: Path) -> None:
        """The study's own log file, opened once the study's folder is known."""


class TwoStreams:
    """A :class:`Reporter` written once: ``say`` and ``show`` both go to :meth:`emit`, which names the
    stream (``"say"`` or ``"show"``); a subclass writes :meth:`emit` and :meth:`log_to`."""

    def say(
        self,
        text: RenderableType,
        *,
        style: str | None = None,
        markup: bool | None = None,
        soft_wrap: bool = False,
    ) -> None:
        self.emit("say", text, style=style, markup=markup, soft_wrap=soft_wrap)

    def show(
        self,
        text: RenderableType,
        *,
        style: str | None = None,
        markup: bool | None = None,
        soft_wrap: bool = False,
    ) -> None:
        self.emit("show", text, style=style, markup=markup, soft_wrap=soft_wrap)

    def emit(
        self, stream: str, text: RenderableType, *, style: str | None, markup: bool | None, soft_wrap: bool
    ) -> None:
        raise NotImplementedError

    def log_to(self, path: Path) -> None:
        raise NotImplementedError


@dataclass
class Transcript(TwoStreams):
    """A :class:`Reporter` that keeps what was said and shown (a caller without a console, a test)."""

    said: list[RenderableType] = field(default_factory=list)
    shown: list[RenderableType] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def emit(
        self, stream: str, text: RenderableType, *, style: str | None, markup: bool | None, soft_wrap: bool
    ) -> None:
        (self.said if stream == "say" else self.shown).append(text)

    def log_to(self, path: Path) -> None:
        self.logs.append(path)
