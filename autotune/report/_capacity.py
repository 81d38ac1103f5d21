"""Capacity at an SLO, drawn: latency against offered load for each measured configuration (one
curve per trial, or one for ``autotune bench --capacity``), the SLO as a horizontal line, each
configuration's knee (the highest load that held) marked, and a table of the levels.

Reads the plain dictionaries a capacity measurement stores in its figures (``capacity_levels``,
``capacity``, ``capacity_hi``, ``capacity_slos``: :meth:`autotune.bench.CapacityResult.figures`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.report._html import Cell, Section, esc, figure_html, table_html

__all__ = [
    "capacity_curves_html",
    "capacity_levels_table",
    "capacity_page_sections",
    "capacity_study_section",
    "is_capacity",
]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def is_capacity(raw: Mapping[str, Any] | None) -> bool:
    return bool(raw) and raw.get("capacity_levels") is not None  # type: ignore[union-attr]


def capacity_levels_table(raw: Mapping[str, Any]) -> str:
    """One row a level, in the order measured: load, latencies, saturated, SLO held (and why not)."""
    headers = [
        "level",
        "load x",
        "offered req/s",
        "served req/s",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "TPOT p50 ms",
        "TPOT p90 ms",
        "out tok/s",
        "prefix hit",
        "saturated",
        "SLO",
    ]
    rows: list[list[Cell | str]] = []
    for i, lv in enumerate(raw.get("capacity_levels") or (), start=1):
        hit = lv.get("prefix_hit_rate")
        rows.append(
            [
                Cell.num(i, "{:.0f}"),
                Cell.num(lv.get("x"), "{:.3g}"),
                Cell.num(lv.get("offered_rps"), "{:.3g}"),
                Cell.num(lv.get("served_rps"), "{:.3g}"),
                Cell.num(lv.get("ttft_p50")),
                Cell.num(lv.get("ttft_p90")),
                Cell.num(lv.get("tpot_p50")),
                Cell.num(lv.get("tpot_p90")),
                Cell.num(lv.get("output_throughput")),
                "-" if hit is None else f"{hit:.0%}",
                "yes" if lv.get("saturated") else "no",
                Cell("held", css="ok") if lv.get("held") else Cell(f"broke: {lv.get('broke')}", css="failed"),
            ]
        )
    return table_html(headers, rows, sortable=True)


def capacity_curves_html(series: Sequence[tuple[str, Mapping[str, Any]]], div_id: str) -> str:
    """Latency against offered load for each (label, capacity figures), one panel per SLO metric,
    the SLO as a dashed line and each curve's knee (the highest load that held) as a star."""
    from plotly.subplots import make_subplots

    slos: dict[str, float] = {}
    for _, raw in series:
        slos.update(raw.get("capacity_slos") or {})
    metrics = [m for m in slos if not m.endswith("_mean")] or ["ttft_p90"]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[f"{m} against load" for m in metrics])
    for col, metric in enumerate(metrics, start=1):
        for k, (label, raw) in enumerate(series):
            _draw_curve(fig, col, metric, label, raw, _COLORS[k % len(_COLORS)])
        if metric in slos:
            fig.add_hline(
                y=slos[metric], line_dash="dash", line_color="#59636e", row=1, col=col,
                annotation_text=f"SLO {metric} <= {slos[metric]:g} ms",
            )  # fmt: skip
        fig.update_xaxes(title_text="offered load (req/s)", row=1, col=col)
        fig.update_yaxes(title_text="ms", row=1, col=col)
    fig.update_layout(height=420, margin={"t": 50, "l": 60, "r": 20, "b": 50})
    return figure_html(fig, div_id)


def _draw_curve(fig: Any, col: int, metric: str, label: str, raw: Mapping[str, Any], color: str) -> None:
    """One configuration's ``metric`` against offered load in panel ``col``, its knee (the highest
    load that held) as a star."""
    import plotly.graph_objects as go

    levels = sorted(raw.get("capacity_levels") or (), key=lambda lv: lv.get("offered_rps") or 0)
    text = [
        f"{lv.get('x'):.3g}x: " + ("held" if lv.get("held") else f"broke: {lv.get('broke')}") for lv in levels
    ]
    fig.add_trace(
        go.Scatter(
            x=[lv.get("offered_rps") for lv in levels],
            y=[lv.get(metric) for lv in levels],
            mode="lines+markers",
            name=label,
            legendgroup=label,
            showlegend=col == 1,
            line={"color": color},
            text=text,
            hovertemplate="%{x:.3g} req/s, %{y:.1f} ms<br>%{text}",
        ),
        row=1,
        col=col,
    )
    held = [lv for lv in levels if lv.get("held")]
    if held:
        knee = max(held, key=lambda lv: lv.get("offered_rps") or 0)
        fig.add_trace(
            go.Scatter(
                x=[knee.get("offered_rps")],
                y=[knee.get(metric)],
                mode="markers",
                showlegend=False,
                legendgroup=label,
                marker={"symbol": "star", "size": 14, "color": color},
                hovertemplate=f"{esc(label)}: capacity %{{x:.3g}} req/s<extra></extra>",
            ),
            row=1,
            col=col,
        )


def capacity_page_sections(label: str, raw: Mapping[str, Any], headline: str) -> list[Section]:
    """The sections of ``autotune bench --capacity``'s page: the curve, then the levels."""
    note = f"<p>{esc(headline)}</p>"
    if raw.get("capacity_note"):
        note += f"<p class='note'>{esc(raw['capacity_note'])}</p>"
    return [
        Section(
            "curve", "Latency against load", note + capacity_curves_html([(label, raw)], "plot-capacity")
        ),
        Section("levels", "Levels, in the order measured", capacity_levels_table(raw)),
    ]


def capacity_study_section(rows: Sequence[Any], formats: Mapping[str, str]) -> Section | None:
    """For a capacity study: each trial's latency against load (its knee marked) and its capacity
    with its bracket; None when no trial measured levels."""
    from autotune.report._plots import params_text

    measured = [
        r for r in rows if r.record.ok and r.record.figures is not None and is_capacity(r.record.figures.raw)
    ]
    if not measured:
        return None
    series = [(f"#{r.number}" + (" baseline" if r.baseline else ""), r.record.figures.raw) for r in measured]
    headers = ["trial", "configuration", "capacity req/s", "load x", "broke at req/s", "levels", "note"]
    table_rows: list[list[Cell | str]] = []
    for r in measured:
        raw = r.record.figures.raw
        table_rows.append(
            [
                Cell.num(r.number, "{:.0f}"),
                params_text(r, formats),
                Cell.num(raw.get("capacity"), "{:.3g}"),
                Cell.num(raw.get("capacity_x"), "{:.3g}"),
                Cell.num(raw.get("capacity_hi"), "{:.3g}"),
                Cell.num(len(raw.get("capacity_levels") or ()), "{:.0f}"),
                str(raw.get("capacity_note") or ""),
            ]
        )
    body = (
        "<p class='note'>Each trial's engine replayed the workload at doubling, then bisected loads, its prefix "
        "cache emptied before each; its capacity is the highest load that held every SLO (the star), its "
        "bracket's upper end the lowest load above it that broke one.</p>"
        + capacity_curves_html(series, "plot-capacity")
        + table_html(headers, table_rows, sortable=True)
    )
    return Section("capacity", "Capacity against load", body)
