"""The study report's figures (plotly). Each returns a figure, or a sentence saying why there is none.

A figure that cannot be drawn from what the study holds (no measured trial, one parameter, a
timings file that is gone) is a sentence on the page, never an exception or an empty chart.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.report._data import StudyFacts, TrialRow, pareto_front, request_cdf
from autotune.study import unit

__all__ = [
    "cdf_figure",
    "importance_figure",
    "memory_figure",
    "objective_figure",
    "params_text",
    "pareto_figure",
    "predicted_figure",
]

log = logging.getLogger(__name__)

_BLUE, _ORANGE, _RED, _GREEN, _GREY = "#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#7f7f7f"
_LAYOUT: dict[str, Any] = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}
GiB = 2**30
# the measured trials' two marker kinds: (feasible, name, colour, symbol)
_FEASIBILITY = ((True, "feasible", _BLUE, "circle"), (False, "violates a constraint", _ORANGE, "x"))


def params_text(row: TrialRow, formats: Mapping[str, str]) -> str:
    """The trial's configuration for hover text and tables."""
    if row.baseline:
        return "baseline: " + (
            f"reference {row.record.reference}" if row.record.reference else "vLLM defaults"
        )
    if not row.params:
        return "-"
    shown = []
    for k, v in row.params.items():
        fmt = formats.get(k)
        shown.append(f"{k}={fmt.format(v) if fmt else (f'{v:.3g}' if isinstance(v, float) else v)}")
    return ", ".join(shown)


def _unit(metric: str) -> str:
    return unit(metric)


def objective_figure(facts: StudyFacts) -> go.Figure | str:
    """The objective of every measured trial, the best-so-far among feasible ones, the baseline's
    level, and the trials that measured nothing marked along the axis."""
    measured = [r for r in facts.rows if r.value is not None]
    if not measured:
        return "no trial was measured, so there is no objective to plot"
    metric, unit = facts.objective, _unit(facts.objective)
    fig = go.Figure()
    for feasible, name, color, symbol in _FEASIBILITY:
        pts = [r for r in measured if r.feasible == feasible]
        if pts:
            fig.add_trace(
                go.Scatter(
                    x=[r.number for r in pts],
                    y=[r.value for r in pts],
                    mode="markers",
                    name=name,
                    marker={"color": color, "symbol": symbol, "size": 10},
                    text=[_hover(r, facts) for r in pts],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    xs, ys = _best_so_far(measured, facts.minimize)
    if xs:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="best so far",
                line={"color": _GREEN, "shape": "hv", "width": 2},
            )
        )
    if facts.baseline is not None and facts.baseline.value is not None:
        fig.add_hline(
            y=facts.baseline.value,
            line={"dash": "dash", "color": _GREY},
            annotation_text="baseline",
            annotation_position="top left",
        )
    _mark_lost(fig, facts)
    fig.update_layout(
        title=f"{metric} over trials ({facts.direction})",
        xaxis_title="trial",
        yaxis_title=f"{metric} ({unit})",
        **_LAYOUT,
    )
    return fig


def _best_so_far(measured: Sequence[TrialRow], minimize: bool) -> tuple[list[int], list[float]]:
    """The best feasible value at each trial, in trial order, from the first feasible one on."""
    xs: list[int] = []
    ys: list[float] = []
    best: float | None = None
    for r in sorted(measured, key=lambda r: r.number):
        if r.feasible and r.value is not None:
            better = best is None or (r.value < best if minimize else r.value > best)
            best = r.value if better else best
        if best is not None:
            xs.append(r.number)
            ys.append(best)
    return xs, ys


def _mark_lost(fig: go.Figure, facts: StudyFacts) -> None:
    """The trials that measured nothing, drawn on an overlaid 0..1 axis along the bottom edge."""
    lost = [r for r in facts.rows if r.value is None]
    if not lost:
        return
    fig.add_trace(
        go.Scatter(
            x=[r.number for r in lost],
            y=[0.03] * len(lost),
            yaxis="y2",
            mode="markers",
            name="not measured (failed / infeasible)",
            marker={"color": _RED, "symbol": "triangle-down", "size": 10},
            text=[_hover(r, facts) for r in lost],
            hovertemplate="%{text}<extra></extra>",
        )
    )
    fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False})


def _hover(r: TrialRow, facts: StudyFacts) -> str:
    head = f"trial {r.number} ({r.status}"
    head += f": {r.record.failure})" if r.record.failure else ")"
    lines = [head, params_text(r, facts.param_formats)]
    if r.value is not None:
        lines.append(f"{facts.objective} = {r.value:.4g} {_unit(facts.objective)}")
    if r.violated:
        lines.append("violates " + ", ".join(r.violated))
    if not r.record.ok and r.evidence_line:
        lines.append(r.evidence_line[:160])
    return "<br>".join(_html_text(x) for x in lines)


def _html_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def pareto_figure(facts: StudyFacts) -> go.Figure | str:
    """p90 TTFT against output throughput; the feasible trials no other feasible trial beats on both
    are the front; trials that broke a constraint are marked."""
    pts = [
        (r, t, q)
        for r in facts.measured
        if (t := r.figure("ttft_p90")) is not None and (q := r.output_throughput) is not None
    ]
    if not pts:
        return "no trial measured both p90 TTFT and output throughput"
    fig = go.Figure()
    for ok, name, color, symbol in _FEASIBILITY:
        group = [p for p in pts if p[0].feasible == ok]
        if group:
            fig.add_trace(
                go.Scatter(
                    x=[t for _, t, _ in group],
                    y=[q for _, _, q in group],
                    mode="markers+text",
                    name=name,
                    text=[r.label() for r, _, _ in group],
                    textposition="top center",
                    marker={"color": color, "symbol": symbol, "size": 11},
                    customdata=[_hover(r, facts) for r, _, _ in group],
                    hovertemplate="%{customdata}<br>TTFT p90 %{x:.1f} ms, %{y:.1f} tok/s<extra></extra>",
                )
            )
    feasible = [p for p in pts if p[0].feasible]
    front = [feasible[i] for i in pareto_front([(t, q) for _, t, q in feasible])]
    if front:
        fig.add_trace(
            go.Scatter(
                x=[t for _, t, _ in front],
                y=[q for _, _, q in front],
                mode="lines",
                name="Pareto front",
                line={"color": _GREEN, "shape": "hv", "width": 2},
                hoverinfo="skip",
            )
        )
    _ring_best(fig, facts)
    fig.update_layout(
        title="Trade-off: p90 TTFT vs output throughput (upper left is better)",
        xaxis_title="TTFT p90 (ms)",
        yaxis_title="output throughput (tok/s)",
        **_LAYOUT,
    )
    return fig


def predicted_figure(facts: StudyFacts) -> go.Figure | str:
    """The latency model's p90 TTFT before each start against the measured one (``--predict``), each
    prediction's interval as an error bar, and the y = x line: a point on it was predicted exactly."""
    pts = [
        (
            r,
            float(fc["ttft_p90_ms"]),
            m,
            fc.get("p90_interval_ms") or fc.get("interval_ms") or (math.nan, math.nan),
        )
        for r in facts.measured
        if (fc := r.record.forecast).get("ttft_p90_ms") is not None
        and (m := r.figure("ttft_p90")) is not None
    ]
    if not pts:
        return "no trial was predicted before its start (autotune run --predict)"
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[m for *_, m, _ in pts],
            y=[p for _, p, _, _ in pts],
            mode="markers+text",
            name="trials",
            text=[r.label() for r, *_ in pts],
            textposition="top center",
            marker={"color": _BLUE, "size": 11},
            error_y={
                "type": "data",
                "symmetric": False,
                "color": _GREY,
                "array": [iv[1] - p for _, p, _, iv in pts],
                "arrayminus": [p - iv[0] for _, p, _, iv in pts],
            },
            hovertemplate="measured %{x:.1f} ms, predicted %{y:.1f} ms<extra></extra>",
        )
    )
    top = max(max(m, iv[1]) for _, _, m, iv in pts) * 1.05
    fig.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="y = x", line={"color": _GREEN, "dash": "dash"})
    )
    fig.update_layout(
        title="Predicted before the start against measured: p90 TTFT (the interval as a bar)",
        xaxis_title="measured TTFT p90 (ms)",
        yaxis_title="predicted TTFT p90 (ms)",
        **_LAYOUT,
    )
    return fig


def _ring_best(fig: go.Figure, facts: StudyFacts) -> None:
    """A ring around the study's best trial, when it measured both figures."""
    if facts.best is None:
        return
    t, q = facts.best.figure("ttft_p90"), facts.best.output_throughput
    if t is not None and q is not None:
        fig.add_trace(
            go.Scatter(
                x=[t],
                y=[q],
                mode="markers",
                name=f"best ({facts.objective})",
                marker={"color": "rgba(0,0,0,0)", "size": 20, "line": {"color": _GREEN, "width": 3}},
                hoverinfo="skip",
            )
        )


def importance_figure(study: optuna.Study, facts: StudyFacts) -> go.Figure | str:
    """Optuna's parameter importances (its default evaluator) over the measured tuned trials."""
    if not facts.param_names:
        return "the study tuned no parameter"
    if len(facts.param_names) == 1:
        return f"the study tuned one parameter ({facts.param_names[0]}): there is nothing to rank it against"
    numbers = {r.number for r in facts.measured if not r.baseline and r.params and r.value is not None}
    if len(numbers) < 2:
        return f"importances need at least 2 measured trials with tuned parameters; this study has {len(numbers)}"
    trials = [t for t in study.get_trials(deepcopy=False) if t.number in numbers]
    scratch = optuna.create_study(direction=study.direction)  # in memory: the study is never written
    scratch.add_trials(trials)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importances = optuna.importance.get_param_importances(scratch)
    except (ValueError, RuntimeError, ZeroDivisionError) as exc:
        log.debug("parameter importances failed", exc_info=True)
        return f"Optuna could not rank the parameters from {len(numbers)} measured trials ({exc})"
    shown = {k: v for k, v in importances.items() if math.isfinite(v)}
    if not shown or not any(shown.values()):
        return (
            f"the {len(numbers)} measured trials do not separate the parameters (every importance is 0); "
            "more trials are needed"
        )
    names = list(shown)[::-1]  # the most important on top
    fig = go.Figure(
        go.Bar(
            x=[shown[n] for n in names],
            y=names,
            orientation="h",
            marker_color=_BLUE,
            hovertemplate="%{y}: %{x:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Parameter importance for {facts.objective} ({len(numbers)} measured trials"
        + ("; few trials: a rough ranking)" if len(numbers) < 10 else ")"),
        xaxis_title="importance (share, sums to 1)",
        height=max(300, 60 + 40 * len(names)),
        **_LAYOUT,
    )
    return fig


def cdf_figure(facts: StudyFacts, search_dir: Path | None) -> tuple[go.Figure | None, list[str]]:
    """Per-request TTFT and TPOT distributions of the baseline and the best, overlaid; and the
    sentences saying what could not be drawn."""
    notes: list[str] = []
    arms: list[tuple[str, TrialRow, str]] = []
    if facts.baseline is not None:
        arms.append((f"baseline (trial {facts.baseline.number})", facts.baseline, _GREY))
    else:
        notes.append("no baseline was measured")
    if facts.best is not None and (facts.baseline is None or facts.best.number != facts.baseline.number):
        arms.append((f"best (trial {facts.best.number})", facts.best, _GREEN))
    elif facts.best is None:
        notes.append("no feasible trial")
    else:
        notes.append("the baseline is the best trial: one distribution")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT per request", "TPOT per request"))
    drawn = 0
    for col, name in ((1, "ttft"), (2, "tpot")):
        for label, row, color in arms:
            cdf = request_cdf(row, name, search_dir)
            if isinstance(cdf, str):
                if cdf not in notes:
                    notes.append(cdf)
                continue
            xs, ys = cdf
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    name=label,
                    legendgroup=label,
                    showlegend=col == 1,
                    line={"color": color, "shape": "hv", "width": 2},
                    hovertemplate=f"{label}<br>%{{x:.1f}} ms: %{{y:.0%}} of requests<extra></extra>",
                ),
                row=1,
                col=col,
            )
            drawn += 1
        fig.update_xaxes(title_text=f"{name.upper()} (ms)", row=1, col=col)
    if not drawn:
        return None, notes
    fig.update_yaxes(title_text="share of requests (CDF)", tickformat=".0%", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02], row=1, col=2)
    fig.update_layout(title="Latency distributions: baseline vs best", **_LAYOUT)
    return fig, notes


def memory_figure(facts: StudyFacts, working_set_tokens: int | None) -> go.Figure | str:
    """Per trial: KV capacity against the working set, peak memory, cache hit rates."""
    rows = [
        r
        for r in facts.rows
        if r.record.kv_tokens or r.gpu_peak_bytes or r.rss_peak_bytes or r.prefix_hit_rate is not None
    ]
    if not rows:
        return "no trial recorded KV capacity, memory peaks or hit rates"
    labels = [r.label() for r in rows]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=("KV cache capacity (tokens)", "Peak memory (GiB)", "Cache hit rates"),
        horizontal_spacing=0.08,
    )
    fig.add_trace(
        go.Bar(x=labels, y=[r.record.kv_tokens for r in rows], name="KV tokens", marker_color=_BLUE),
        row=1,
        col=1,
    )
    if working_set_tokens:
        fig.add_hline(
            y=working_set_tokens,
            line={"dash": "dash", "color": _RED},
            annotation_text=f"working set {working_set_tokens:,}",
            annotation_position="top left",
            row=1,
            col=1,
        )
    _bars(fig, labels, [r.gpu_peak_bytes for r in rows], "GPU peak (per device)", _ORANGE, 2, GiB)
    _bars(fig, labels, [r.rss_peak_bytes for r in rows], "host RSS peak", _GREY, 2, GiB)
    _bars(fig, labels, [r.prefix_hit_rate for r in rows], "prefix-cache hits", _GREEN, 3, 1)
    if facts.has_offload:
        _bars(fig, labels, [r.host_hit_rate for r in rows], "CPU offload hits", "#9467bd", 3, 1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1], row=1, col=3)
    fig.update_layout(title="Memory and caches per trial", barmode="group", **_LAYOUT)
    return fig


def _bars(
    fig: go.Figure,
    labels: Sequence[str],
    values: Sequence[float | None],
    name: str,
    color: str,
    col: int,
    scale: int,
) -> None:
    if not any(v is not None for v in values):
        return
    fig.add_trace(
        go.Bar(
            x=list(labels),
            y=[None if v is None else v / scale for v in values],
            name=name,
            marker_color=color,
        ),
        row=1,
        col=col,
    )
