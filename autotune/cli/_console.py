"""The CLI's consoles and logging: the only place handlers are configured."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from rich.console import Console, RenderableType

from autotune.usecases import TwoStreams

__all__ = ["ConsoleReporter", "console", "log_to_file", "out", "setup_logging", "verbose"]

# Piped output (nightly jobs, CI logs) gets wide lines instead of rich's 80-column default.
console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
_state = {"verbose": False}


def verbose() -> bool:
    return _state["verbose"]


def _not_optuna(record: logging.LogRecord) -> bool:
    """Optuna reports an interrupted trial as a warning with the whole traceback; the CLI says it in
    one line instead (the study's log keeps Optuna's record)."""
    return not record.name.startswith("optuna")


def setup_logging(is_verbose: bool) -> None:
    import optuna

    _state["verbose"] = is_verbose
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if is_verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.DEBUG if is_verbose else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if not is_verbose:
        handler.addFilter(_not_optuna)
    root.handlers[:] = [handler]
    import warnings

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats
    optuna.logging.disable_default_handler()  # its records reach our handlers (and study.log) instead
    optuna.logging.enable_propagation()
    logging.getLogger("optuna").setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_to_file(path: Path) -> None:
    """Also log (INFO and up) to ``path``: a study's ``study.log``."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)


class ConsoleReporter(TwoStreams):
    """A use case's words on the terminal (:class:`autotune.usecases.Reporter`): what it says on the way to
    standard error, its result to standard output, and the study's log beside the study."""

    def emit(
        self, stream: str, text: RenderableType, *, style: str | None, markup: bool | None, soft_wrap: bool
    ) -> None:
        (console if stream == "say" else out).print(text, style=style, markup=markup, soft_wrap=soft_wrap)

    def log_to(self, path: Path) -> None:
        log_to_file(path)
