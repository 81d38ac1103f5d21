"""The ``autotune`` command line. Thin: parse, call, print.

This is the one place that turns an :class:`AutotuneError` into a one-line message and an
exit code; tracebacks only with ``--verbose``.
"""

from __future__ import annotations

import logging
import shlex
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console

from autotune.errors import AutotuneError

__all__ = ["app", "main"]

app = typer.Typer(
    name="autotune",
    help="Tune a vLLM server on your own workload: Optuna proposes a configuration, real vLLM runs it, "
    "your traffic is replayed and measured, and the best configuration that fits is exported.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# Piped output (nightly jobs, CI logs) gets wide lines instead of rich's 80-column default.
_WIDTH = None if sys.stderr.isatty() else 160
console = Console(stderr=True, highlight=False, width=_WIDTH)
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
_state: dict[str, bool] = {"verbose": False}


def _setup_logging(verbose: bool) -> None:
    _state["verbose"] = verbose
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.handlers[:] = [handler]
    for noisy in ("httpx", "httpcore", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.callback()
def _main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Debug logging and full tracebacks.")
    ] = False,
) -> None:
    _setup_logging(verbose)


def _register_subcommands() -> None:
    from autotune import _cli_compare, _cli_run, _cli_study
    from autotune.workload.cli import app as workload_app

    app.command("run")(_cli_run.run)
    app.command("export")(_cli_study.export)
    app.command("show")(_cli_study.show)
    app.command("compare")(_cli_compare.compare)
    app.command("tiny-model")(_cli_study.tiny_model)
    app.add_typer(
        workload_app, name="workload", help="Synthesize, import, inspect and validate workload files."
    )
    try:
        from autotune import _cli_doctor

        app.command("doctor")(_cli_doctor.doctor)
    except ImportError:  # pragma: no cover - the memory package is optional during development
        pass


def main(argv: Optional[list[str]] = None) -> None:  # noqa: UP045 - typer
    from autotune.engine import install_signal_handlers, stop_all

    _register_subcommands()
    install_signal_handlers()
    try:
        rc = app(args=argv, standalone_mode=False)  # Typer turns Ctrl-C into a returned 130
        if rc == 130:
            raise KeyboardInterrupt
        if isinstance(rc, int) and rc:
            stop_all()
            raise SystemExit(rc)
    except AutotuneError as exc:
        stop_all()
        if _state["verbose"]:
            console.print_exception()
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        stop_all()
        console.print("[yellow]interrupted: every vLLM process was stopped[/yellow]")
        raise SystemExit(130) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        stop_all()
        raise SystemExit(130) from None
    except Exception as exc:
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        stop_all()
        raise


def echo_command(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


__all__ += ["console", "out"]
