"""``autotune report``: one self-contained HTML page of a study (reads the study, never writes to it)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from autotune.cli._console import out
from autotune.cli._open import existing_study
from autotune.cli._study_options import Storage, StudiesDir
from autotune.errors import ConfigError, ExportError, WorkloadError

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = ["report"]


def report(
    study: Annotated[str, typer.Option(help="Study name.")],
    storage: Storage = None,
    studies_dir: StudiesDir = Path("studies"),
    out_path: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="HTML file to write. Default: STUDIES_DIR/STUDY/report.html."),
    ] = None,
    workload: Annotated[
        Optional[Path],
        typer.Option(
            "--workload",
            "-w",
            help="The study's workload file: adds its facts and draws its working set against KV capacity.",
        ),
    ] = None,
) -> None:
    """Write a study's report: summary, sortable trial table, objective over trials, TTFT vs
    throughput, parameter importance, per-request latency distributions and memory. One HTML file
    that opens offline. A group study's (several models on one server): its group trials, the split
    over trials and one section per model."""
    from autotune.report import is_group_study, write_group_report, write_study_report

    st = existing_study(storage, study, studies_dir)
    target = out_path or studies_dir / study / "report.html"
    if is_group_study(st):
        if workload is not None:
            raise ConfigError(
                f"--workload {workload}: study {study!r} is a group study, and each of its models replays "
                "the workload its entry names (fix: drop --workload)"
            )
        write_group_report(st, target)
        out.print(f"wrote {target}")
        return
    facts = _workload_facts(workload, st) if workload is not None else None
    write_study_report(st, target, workload=facts, timings_dir=studies_dir / study)
    out.print(f"wrote {target}")


def _workload_facts(path: Path, st: Any) -> dict[str, Any]:
    """``workload inspect``'s facts at the block size the best trial ran with (the model's tokenizer
    when the study's model directory is here, else approximate word counts)."""
    from autotune.engine import block_size_of
    from autotune.export import measured_engine_argv
    from autotune.study import baseline_trial, best_feasible, read_record
    from autotune.workload import inspect_workload, load_tokenizer, load_workload

    workload = load_workload(path, skip_bad_lines=True)
    trial = best_feasible(st) or baseline_trial(st)
    rec = read_record(trial) if trial is not None else None
    block, tokenizer = None, None
    if rec is not None and rec.command:
        with contextlib.suppress(ExportError, ValueError):
            model, flags = measured_engine_argv(rec.command)
            block = block_size_of(flags)
            if Path(model).is_dir():
                with contextlib.suppress(WorkloadError):  # no tokenizer there: approximate words
                    tokenizer = load_tokenizer(Path(model))
    if block is None:
        block = 128 if rec is not None and "cpu build" in (rec.engine or "") else 16
    return inspect_workload(workload, block_size=block, tokenizer=tokenizer).as_dict()
