"""The CLI's consoles and logging: the only place handlers are configured."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from rich.console import Console

__all__ = ["console", "log_to_file", "out", "setup_logging", "verbose"]

# Piped output (nightly jobs, CI logs) gets wide lines instead of rich's 80-column default.
console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
_state = {"verbose": False}


def verbose() -> bool:
    return _state["verbose"]


def setup_logging(is_verbose: bool) -> None:
    _state["verbose"] = is_verbose
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if is_verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.DEBUG if is_verbose else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers[:] = [handler]
    for noisy in ("httpx", "httpcore", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_to_file(path: Path) -> None:
    """Also log (INFO and up) to ``path``: a study's ``study.log``."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)
