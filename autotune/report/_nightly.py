"""The index page across nights: the incumbent's objective per night with its noise band,
promotions and regressions marked, what changed in the fingerprints, and a link to each night's
report.

The nightly command hands plain records (mappings), one per night::

    {"date": "2026-11-30", "objective": "ttft_p90",
     "incumbent_median": 412.0, "incumbent_low": 398.0, "incumbent_high": 431.0,
     "promoted": False, "regression": False,
     "fingerprint_changes": ["vllm 0.31.0 -> 0.32.0"], "report_path": "nights/2026-11-30/report.html"}

``incumbent`` may also be a mapping ``{"median", "low", "high"}``; ``objective``, ``reason`` and
``report_path`` are optional.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from autotune.report._html import Cell, Section, figure_html, page, table_html, write_html
from autotune.report._nights import unit

__all__ = ["Night", "write_nightly_index"]


@dataclass(frozen=True)
class Night:
    """One night as the index shows it."""

    date: str
    median: float | None
    low: float | None
    high: float | None
    promoted: bool
    regression: bool
    fingerprint_changes: tuple[str, ...]
    report_path: str | None
    objective: str | None = None
    reason: str | None = None
    trials: int | None = None  # the trials the study holds for this night
    workload_changes: tuple[str, ...] = ()  # how tonight's workload differs from last night's

    @classmethod
    def from_mapping(cls, night: Mapping[str, Any], index: int) -> Night:
        if "date" not in night:
            raise ValueError(
                f"night record {index} has no 'date' (keys: {', '.join(sorted(night)) or 'none'})"
            )
        inc = night.get("incumbent")
        nested = inc if isinstance(inc, Mapping) else {}

        def figure(key: str) -> float | None:
            value = nested.get(key, night.get(f"incumbent_{key}"))
            if value is None:
                return None
            f = float(value)
            return f if math.isfinite(f) else None

        changes = night.get("fingerprint_changes") or ()
        if isinstance(changes, str):
            changes = (changes,)
        report = night.get("report_path")
        return cls(
            date=str(night["date"]),
            median=figure("median"),
            low=figure("low"),
            high=figure("high"),
            promoted=bool(night.get("promoted")),
            regression=bool(night.get("regression")),
            fingerprint_changes=tuple(str(c) for c in changes),
            report_path=None if report is None else str(report),
            objective=night.get("objective"),
            reason=night.get("reason"),
            trials=None if night.get("trials") is None else int(night["trials"]),
            workload_changes=tuple(str(c) for c in night.get("workload_changes") or ()),
        )


def write_nightly_index(
    nights: Sequence[Mapping[str, Any]], path: Path, *, plotly_src: str | None = None
) -> Path:
    """Write the index of ``nights`` (oldest first, as given) to ``path``: one HTML file that opens
    offline (plotly.js inline, or from ``plotly_src``, a relative path to a shared copy); links to
    each night's report are relative to the index, so the folder can move."""
    path = Path(path)
    parsed = [Night.from_mapping(n, i) for i, n in enumerate(nights)]
    objective = next((n.objective for n in reversed(parsed) if n.objective), None) or "objective"
    sections = [
        Section("trend", f"Incumbent {objective} per night", _trend(parsed, objective)),
        Section("nights", "Nights", _table(parsed, path.parent)),
    ]
    subtitle = (
        f"{len(parsed)} night(s), {sum(n.promoted for n in parsed)} promotion(s), "
        f"{sum(n.regression for n in parsed)} regression(s)"
    )
    text = page("autotune nightly index", subtitle, sections, plots=_drawable(parsed), plotly_src=plotly_src)
    return write_html(text, path)


def _drawable(nights: Sequence[Night]) -> bool:
    return any(n.median is not None for n in nights)


def _trend(nights: Sequence[Night], objective: str) -> str:
    if not nights:
        return "<p class='note'>No night has run yet.</p>"
    if not _drawable(nights):
        return "<p class='note'>Not shown: no night measured its incumbent.</p>"
    fig = go.Figure()
    for i, seg in enumerate(_segments(nights)):  # one line per workload: a change is not an improvement
        _draw_segment(fig, i, seg)
    _mark_verdicts(fig, nights)
    fig.update_layout(
        template="plotly_white",
        title=f"Incumbent {objective} per night",
        xaxis={"title": "date (UTC)", "type": "date"},
        yaxis_title=f"{objective} ({unit(objective)})",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return figure_html(fig, "plot-nightly")


def _draw_segment(fig: go.Figure, i: int, seg: Sequence[Night]) -> None:
    """Workload ``i``'s nights: the noise band, the incumbent's median, and (after the first) the
    break where the workload changed, named."""
    suffix = "" if i == 0 else f" (workload {i + 1})"
    band = [n for n in seg if n.low is not None and n.high is not None]
    if band:
        fig.add_trace(
            go.Scatter(
                x=[_x(n.date) for n in band] + [_x(n.date) for n in reversed(band)],
                y=[n.high for n in band] + [n.low for n in reversed(band)],
                fill="toself",
                fillcolor="rgba(31,119,180,0.15)",
                line={"width": 0},
                name="noise band (min-max of the night)" + suffix,
                showlegend=i == 0,
                hoverinfo="skip",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[_x(n.date) for n in seg],
            y=[n.median for n in seg],
            mode="lines+markers",
            name="incumbent median" + suffix,
            showlegend=i == 0,
            line={"color": "#1f77b4"},
            text=[_hover(n) for n in seg],
            hovertemplate="%{x}: %{y:.4g}<br>%{text}<extra></extra>",
        )
    )
    if i > 0:  # the break, named where it happens
        x = _x(seg[0].date)
        fig.add_shape(
            type="line", x0=x, x1=x, yref="paper", y0=0, y1=1, line={"dash": "dot", "color": "#888"}
        )
        fig.add_annotation(
            x=x, yref="paper", y=1, yanchor="bottom", showarrow=False, font={"size": 11},
            text="workload changed: " + "; ".join(seg[0].workload_changes)[:80],
        )  # fmt: skip


def _mark_verdicts(fig: go.Figure, nights: Sequence[Night]) -> None:
    """The nights that promoted a configuration, and those that found a regression."""
    for flag, name, color, symbol in (
        ("promoted", "promotion", "#2ca02c", "triangle-up"),
        ("regression", "regression", "#d62728", "x"),
    ):
        marked = [n for n in nights if getattr(n, flag) and n.median is not None]
        if marked:
            fig.add_trace(
                go.Scatter(
                    x=[_x(n.date) for n in marked],
                    y=[n.median for n in marked],
                    mode="markers",
                    name=name,
                    marker={"color": color, "symbol": symbol, "size": 16, "line": {"width": 2}},
                    text=[_hover(n) for n in marked],
                    hovertemplate="%{x}: " + name + "<br>%{text}<extra></extra>",
                )
            )


def _segments(nights: Sequence[Night]) -> list[list[Night]]:
    """The nights cut where the workload changed: each part is one workload's line."""
    parts: list[list[Night]] = []
    for n in nights:
        if not parts or n.workload_changes:
            parts.append([])
        parts[-1].append(n)
    return parts


def _x(date: str) -> str:
    """A night's date as plotly's date axis reads it: ``2026-12-02T04:46:05+00:00`` -> ``2026-12-02
    04:46:05`` (the records are in UTC; plotly.js does not read offsets)."""
    return date.replace("T", " ")[:19]


def _hover(n: Night) -> str:
    lines = list(n.fingerprint_changes) or ["no fingerprint change"]
    if n.reason:
        lines.append(n.reason)
    return "<br>".join(s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")[:160] for s in lines)


def _table(nights: Sequence[Night], index_dir: Path) -> str:
    if not nights:
        return "<p class='note'>No night has run yet.</p>"
    rows = []
    for n in reversed(nights):  # the latest first
        band = f"{n.low:,.1f}-{n.high:,.1f}" if n.low is not None and n.high is not None else "-"
        decision = "regression" if n.regression else ("promoted" if n.promoted else "kept")
        rows.append(
            [
                Cell(n.date),
                Cell.num(n.median),
                Cell(band, css="n"),
                Cell.num(n.trials, "{:d}"),
                Cell(decision, css="failed" if n.regression else ("ok" if n.promoted else "")),
                Cell("; ".join(n.fingerprint_changes) or "none"),
                Cell(n.reason or ""),
                _link(n.report_path, index_dir),
            ]
        )
    return table_html(
        [
            "night",
            "incumbent median",
            "noise band",
            "trials",
            "decision",
            "fingerprint changes",
            "why",
            "report",
        ],
        rows,
        sortable=True,
    )


def _relative(report: str, index_dir: Path) -> str:
    p = Path(report)
    if not p.is_absolute():
        return p.as_posix()
    try:
        return Path(os.path.relpath(p, index_dir)).as_posix()
    except ValueError:  # another drive (Windows)
        return p.as_posix()


def _link(report: str | None, index_dir: Path) -> Cell:
    return Cell("report", href=_relative(report, index_dir)) if report else Cell("-")
