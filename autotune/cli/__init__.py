"""The ``autotune`` command line: a leaf package (nothing else imports it). Thin: parse, call, print.

One module per command; :func:`main` is the one place that turns an :class:`AutotuneError` into a
one-line message and an exit code, and a usage error into one line plus usage and exit 2.
Tracebacks only with ``--verbose``.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from autotune.cli import bench as _bench
from autotune.cli import capture as _capture
from autotune.cli import compare as _compare
from autotune.cli import doctor as _doctor
from autotune.cli import init as _init
from autotune.cli import nightly as _nightly
from autotune.cli import predict as _predict
from autotune.cli import report as _report
from autotune.cli import run_command as _run
from autotune.cli import study as _study
from autotune.cli import tiny_model as _tiny
from autotune.cli import worker as _worker
from autotune.cli._console import console, setup_logging, verbose
from autotune.cli.workload import app as workload_app
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


@app.callback()
def _main(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Debug logging and full tracebacks.")
    ] = False,
) -> None:
    setup_logging(verbose)


app.command("init")(_init.init)
app.command("run")(_run.run)
app.command("compare")(_compare.compare)
app.command("bench")(_bench.bench)
app.command("show")(_study.show)
app.command("export")(_study.export)
app.command("report")(_report.report)
app.command("doctor")(_doctor.doctor)
app.command("tiny-model")(_tiny.tiny_model)
app.command("worker")(_worker.worker)
app.command("capture")(_capture.capture)
app.command("predict")(_predict.predict)
app.add_typer(_nightly.app, name="nightly")
app.add_typer(workload_app, name="workload", help="Synthesize, import, inspect and validate workload files.")


def main(argv: Optional[list[str]] = None) -> None:  # noqa: UP045 - typer
    from autotune.engine import install_signal_handlers, stop_all

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
        if verbose():
            console.print_exception()
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        stop_all()
        console.print("[yellow]interrupted: every vLLM process was stopped[/yellow]")
        raise SystemExit(130) from None
    except typer.Exit as exc:
        stop_all()
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        stop_all()
        raise SystemExit(130) from None
    except typer.TyperException as exc:  # typer's own click: usage errors, bad parameters
        stop_all()
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except Exception:
        stop_all()
        raise
