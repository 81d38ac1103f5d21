"""What a night leaves to read: its report (the plan, the re-measurement runs, the candidates and
the decision, with the workload counted as the study counts it), the index of nights, and the
history as lines for ``autotune nightly history``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from autotune.engine import block_size_of
from autotune.errors import AutotuneError, StudyNotFoundError
from autotune.nightly._fingerprint import model_tokenizer
from autotune.nightly._history import NightRecord, figure_range, nights, save_night
from autotune.report import write_nightly_index, write_plotly_js, write_study_report
from autotune.study import open_storage, redact_url, resolve_storage_url
from autotune.tuning import GROUP_FINGERPRINT_ATTR, TuningSetup
from autotune.workload import inspect_workload

__all__ = ["HistoryTable", "history_table", "index_rows", "night_workload_facts", "write_night_reports"]

log = logging.getLogger(__name__)


def _block_size(args: list[str] | None, platform: str) -> int:
    """The command's block size (the engine reads it), else vLLM's default on this platform (CPU 128,
    CUDA 16)."""
    written = block_size_of(args)
    return written if written is not None else (128 if platform == "cpu" else 16)


def night_workload_facts(setup: TuningSetup, record: NightRecord) -> dict[str, Any]:
    """The workload's facts as the study counts its tokens (the model's tokenizer when the model is
    a local directory with one, else approximate words) at the incumbent command's block size."""
    tokenizer = model_tokenizer(setup.choices.model)
    block = _block_size(record.incumbent_args, setup.platform)
    facts = inspect_workload(setup.workload, block_size=block, tokenizer=tokenizer).as_dict()
    facts["counted_by"] = tokenizer.name if tokenizer is not None else "approximate words (no tokenizer here)"
    return facts


def index_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """The nights as :func:`autotune.report.write_nightly_index` reads them."""
    return [
        {
            "date": n.date,
            "objective": n.metric,
            "incumbent": n.incumbent_figure or {},
            "promoted": n.decision == "promoted",
            "regression": n.regression,
            "fingerprint_changes": [*n.workload_changes, *n.changes],
            "workload_changes": list(n.workload_changes),
            "report_path": n.report,
            "reason": f"{n.decision}: {n.reason}",
            "trials": n.trials,
        }
        for n in nights(study)
    ]


def write_night_reports(
    study: optuna.Study, sdir: Path, record: NightRecord, setup: TuningSetup
) -> tuple[NightRecord, Path | None, Path | None]:
    """The night's report (``night-NNNN/report.html``) and the index (``nights.html``); the record
    saved again with its report's path. A report that cannot be written is logged, never a failed
    night: the decision and the export are already made. Returns (record, report, index)."""
    report: Path | None = None
    shared: str | None = None  # one plotly.min.js for all nights' pages, not 4.8 MB inline per night
    try:
        shared = write_plotly_js(sdir).name
    except OSError as exc:
        log.warning("plotly.min.js was not written beside the reports (inlined instead): %s", exc)
    try:
        wl = night_workload_facts(setup, record)
        report = write_study_report(
            study,
            sdir / f"night-{record.number:04d}" / "report.html",
            workload=wl,
            fingerprints=record.fingerprints,
            timings_dir=sdir,
            night=record.number,
            plotly_src=None if shared is None else f"../{shared}",
        )
        record = replace(record, report=str(report))
        save_night(study, record)
    except (AutotuneError, OSError, ValueError) as exc:
        log.warning("night %d: its report was not written: %s: %s", record.number, type(exc).__name__, exc)
    index: Path | None = None
    try:
        index = write_nightly_index(index_rows(study), sdir / "nights.html", plotly_src=shared)
    except (OSError, ValueError) as exc:
        log.warning("the index of nights was not written: %s: %s", type(exc).__name__, exc)
    return record, report, index


@dataclass(frozen=True)
class HistoryTable:
    """``autotune nightly history``: a title, the columns and one row per night."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


HISTORY_COLUMNS = (
    "night",
    "date",
    "incumbent",
    "figure",
    "noise",
    "regression",
    "decision",
    "trials",
    "time",
    "why",
)


def history_table(study: str, storage: str | None, studies_dir: Path) -> HistoryTable:
    """The nights of a study as a table, the counts as the study holds them."""
    url = resolve_storage_url(storage, study, studies_dir)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise StudyNotFoundError(f"--study: no study named {study!r} (no {url.removeprefix('sqlite:///')})")
    try:
        st = optuna.load_study(study_name=study, storage=open_storage(url))
    except KeyError as exc:
        raise StudyNotFoundError(f"--study: no study named {study!r} in {redact_url(url)}") from exc
    if GROUP_FINGERPRINT_ATTR in st.user_attrs:
        return _group_history(study, nights(st))
    found = nights(st)
    if not found:
        return HistoryTable(
            f"study {study} has no nights yet (run `autotune nightly --study {study} ...`)", (), ()
        )
    rows = []
    for n in found:
        changed = "; ".join(n.workload_changes + n.changes)
        rows.append(
            (
                str(n.number),
                n.date[:16],
                n.incumbent_label,
                figure_range(n.incumbent_figure, n.metric),
                n.band_text().removeprefix("noise band "),
                "YES" if n.regression else "no",
                n.decision + (f" #{n.promoted_trial}" if n.promoted_trial is not None else ""),
                n.trials_text(),
                f"{n.duration_s / 60:.1f} of {n.budget_s / 60:.1f} min",
                n.reason + (f"; changed: {changed}" if changed else ""),
            )
        )
    return HistoryTable(f"nights of study {study} ({found[-1].metric})", HISTORY_COLUMNS, tuple(rows))


_GROUP_COLUMNS = (
    "night",
    "date",
    "incumbent",
    "its objective",
    "regression",
    "decision",
    "trials",
    "time",
    "why",
)


def _group_history(study: str, found: list[NightRecord]) -> HistoryTable:
    """A group study's nights (``autotune nightly -f group.yaml``): the incumbent's group objective
    against each night's baseline group, the decision and why."""
    if not found:
        return HistoryTable(
            f"group study {study} has no nights yet (run `autotune nightly -f GROUP.yaml`)", (), ()
        )
    rows = []
    for n in found:
        value = (n.group or {}).get("incumbent_value")
        changed = "; ".join(n.changes)
        rows.append(
            (
                str(n.number),
                n.date[:16],
                n.incumbent_label,
                f"{value:.3f}" if isinstance(value, int | float) else "-",
                "YES" if n.regression else "no",
                n.decision + (f" #{n.promoted_trial}" if n.promoted_trial is not None else ""),
                str(n.trials),
                f"{n.duration_s / 60:.1f} min",
                n.reason + (f"; changed: {changed}" if changed else ""),
            )
        )
    return HistoryTable(
        f"nights of group study {study} (group objective, baseline group = 1.0)", _GROUP_COLUMNS, tuple(rows)
    )
