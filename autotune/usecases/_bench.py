"""The ``bench`` use case: measure a server that is already running as a study trial measures its
engine (nothing started or stopped); write the measurement as JSON and, for a capacity bracket, a page."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.study import TrialRecord
from autotune.studyfile import StudySpec
from autotune.trial import no_success_reason

__all__ = ["BenchOutcome", "bench", "capacity_headline"]


@dataclass(frozen=True)
class BenchOutcome:
    """One measurement of a running server: what was measured (``heading``: the server, the model, the
    requests and arrivals), its record, the SLOs, the capacity headline (``--capacity``), the files
    written, and why no request succeeded (None when some did)."""

    heading: str
    record: TrialRecord
    slos_ms: dict[str, float]
    headline: str | None
    written: tuple[Path, ...]
    failure: str | None

    @property
    def exit_code(self) -> int:
        return 1 if self.failure is not None else 0


def bench(
    choices: StudySpec, url: str, *, json_out: Path | None = None, html_out: Path | None = None
) -> BenchOutcome:
    """Measure the server at ``url`` with ``choices`` (``objective: capacity``: bracket its capacity at
    the SLOs); write the record to ``json_out`` and, for a capacity, the page to ``html_out`` (default:
    beside ``json_out``, as .html)."""
    from autotune.tuning import bench_server

    capacity = choices.objective == "capacity"
    result = bench_server(choices, url)
    rec = result.record
    heading = (
        f"{result.server.url}, model {result.server.model}: {len(result.workload)} requests, "
        f"{result.arrival.describe()}"
    )
    headline = capacity_headline(rec) if capacity else None
    written: list[Path] = []
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.as_json(), indent=2))
        written.append(json_out)
    page_path = html_out or (json_out.with_suffix(".html") if capacity and json_out is not None else None)
    if headline is not None and page_path is not None and rec.figures is not None:
        _write_page(page_path, result.server.url, rec.figures.as_dict(), headline)
        written.append(page_path)
    failure = None
    if rec.figures is None or rec.figures.completed == 0:
        failure = no_success_reason(rec.figures) if rec.figures is not None else "nothing measured"
    return BenchOutcome(heading, rec, result.slos_ms, headline, tuple(written), failure)


def capacity_headline(rec: TrialRecord) -> str:
    """``capacity at SLO ttft_p90<=800ms: 14.2 req/s (4x the workload's arrivals) [held 14.2, broke 15.9 req/s]``."""
    raw = rec.figures.as_dict() if rec.figures is not None else {}
    slos = ", ".join(f"{k}<={v:g}ms" for k, v in (raw.get("capacity_slos") or {}).items())
    held, x, hi = raw.get("capacity"), raw.get("capacity_x"), raw.get("capacity_hi")
    if not held:
        return f"capacity at SLO {slos}: none: {raw.get('capacity_note') or 'no level held'}"
    upper = f"broke {hi:.3g} req/s" if hi is not None else "no level broke"
    line = f"capacity at SLO {slos}: {held:.3g} req/s ({x:.3g}x the workload's arrivals) [held {held:.3g}, {upper}]"
    return line + (f"; {raw['capacity_note']}" if raw.get("capacity_note") else "")


def _write_page(path: Path, url: str, raw: dict[str, Any], headline: str) -> None:
    from autotune.report import capacity_page_sections, page, write_html

    write_html(
        page(
            f"capacity of {url}",
            "measured by autotune bench --capacity",
            capacity_page_sections(url, raw, headline),
            plots=True,
        ),
        path,
    )
