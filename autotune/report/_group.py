"""The report of a group study (several models on one server, ``autotune run -f group.yaml``):
the group's trials with their splits, the split over trials, and one section per model.

Reads only what the group study records (:mod:`autotune.tuning.group._study`): each trial's
``split``, ``group_trial`` (baseline, prior, sampled), ``group_ratios``, ``group_reason`` and
``model:NAME`` (status, figures, command, reason, saturated); the study's group fingerprint (each
model's model, workload, space and weight, and the budget) and its confirmations.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.errors import StorageError
from autotune.report._html import Cell, Section, esc, figure_html, page, table_html, write_html
from autotune.report._summary import facts_table
from autotune.study import GROUP_FINGERPRINT_ATTR

__all__ = [
    "GroupTrialView",
    "GroupView",
    "group_view",
    "is_group_study",
    "render_group_report",
    "write_group_report",
]
_MODEL_FIGURES = (
    ("ttft_p90", "TTFT p90 ms", "{:,.1f}"),
    ("ttft_p50", "TTFT p50 ms", "{:,.1f}"),
    ("tpot_p90", "TPOT p90 ms", "{:,.2f}"),
    ("e2el_p90", "E2E p90 ms", "{:,.0f}"),
    ("output_throughput", "out tok/s", "{:,.1f}"),
    ("completed", "completed", "{:,.0f}"),
    ("failed", "failed", "{:,.0f}"),
)
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_LAYOUT: dict[str, Any] = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def is_group_study(study: optuna.Study) -> bool:
    """Whether ``study`` is a group study (it recorded the group's fingerprint on its first run)."""
    return GROUP_FINGERPRINT_ATTR in study.user_attrs


@dataclass(frozen=True)
class GroupTrialView:
    """One group trial as recorded."""

    number: int
    kind: str  # baseline, prior, sampled
    status: str  # ok, infeasible, failed
    split: Mapping[str, float]
    value: float | None  # the group's objective (the baseline group: 1.0)
    ratios: Mapping[str, float]
    reason: str
    models: Mapping[str, Mapping[str, Any]]  # model:NAME as recorded
    params: Mapping[str, Mapping[str, Any]]  # NAME -> its own tuned values


@dataclass(frozen=True)
class GroupView:
    """A group study as recorded."""

    name: str
    names: tuple[str, ...]
    about: Mapping[str, Mapping[str, str]]  # NAME -> model, workload, space, weight (as fingerprinted)
    budget: str
    trials: tuple[GroupTrialView, ...]
    confirmations: Mapping[int, Mapping[str, Any]]

    @property
    def baseline(self) -> GroupTrialView | None:
        return next((t for t in self.trials if t.kind == "baseline"), None)

    @property
    def best(self) -> GroupTrialView | None:
        measured = [t for t in self.trials if t.value is not None]
        return min(measured, key=lambda t: t.value or 0.0, default=None)

    def metric(self, name: str) -> str:
        """The objective metric of model ``name``: recorded with its figures (``metric``), else the
        first of them (the group study writes it first)."""
        for t in self.trials:
            rec = t.models.get(name) or {}
            if rec.get("metric"):
                return str(rec["metric"])
            if rec.get("figures"):
                return str(next(iter(rec["figures"])))
        return "ttft_p90"


def group_view(study: optuna.Study) -> GroupView:
    """What a group study recorded, for a page or a table: its models, budget, trials and confirmations."""
    fp: Mapping[str, Mapping[str, str]] = study.user_attrs.get(GROUP_FINGERPRINT_ATTR) or {}
    about = _fingerprinted(fp)
    trials = tuple(
        _trial_view(t)
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished() and "split" in t.user_attrs
    )
    for trial in trials:
        for n in trial.split:  # a model the fingerprint does not name
            about.setdefault(n, {})
    confirmations = {
        int(k.rsplit("_", 1)[1]): v
        for k, v in study.user_attrs.items()
        if k.startswith("group_confirmation_") and k.rsplit("_", 1)[1].isdigit()
    }
    share = (fp.get("share") or {}).get("what", "")
    return GroupView(study.study_name, tuple(about), about, str(share), trials, confirmations)


def _fingerprinted(fp: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Each model the group fingerprint names (by its weight), with what it says of it: model,
    workload, space, weight."""
    names = [k.rsplit(".", 1)[0] for k in fp if k.endswith(".weight")]
    about: dict[str, dict[str, str]] = {n: {} for n in names}
    for key, value in fp.items():
        model, _, part = key.partition(".")
        if model in about and part:
            about[model][part] = str((value or {}).get("what", ""))
    return about


def _trial_view(t: optuna.trial.FrozenTrial) -> GroupTrialView:
    """One finished group trial as recorded."""
    split = {str(k): float(v) for k, v in (t.user_attrs.get("split") or {}).items()}
    models = {n: t.user_attrs.get(f"model:{n}") or {} for n in split}
    params: dict[str, dict[str, Any]] = {n: {} for n in split}
    for key, value in t.params.items():
        model, _, param = key.partition(".")
        if model in params and model != "split":
            params[model][param] = value
    return GroupTrialView(
        number=t.number,
        kind=str(t.user_attrs.get("group_trial") or "sampled"),
        status=_trial_status(t.value, models),
        split=split,
        value=t.value,
        ratios={str(k): float(v) for k, v in (t.user_attrs.get("group_ratios") or {}).items()},
        reason=str(t.user_attrs.get("group_reason") or ""),
        models=models,
        params=params,
    )


def _trial_status(value: float | None, models: Mapping[str, Mapping[str, Any]]) -> str:
    """ok (the group scored), failed (an engine did not serve), or infeasible (nothing launched, or
    a constraint missed)."""
    if value is not None:
        return "ok"
    if not models or all(not m for m in models.values()):
        return "infeasible"
    return "failed" if any(m.get("status") != "ok" for m in models.values()) else "infeasible"


def write_group_report(study: optuna.Study, path: Path, *, plotly_src: str | None = None) -> Path:
    """Write the report of the group study ``study`` to ``path`` (one HTML file that opens offline).
    Raises :class:`StorageError` for a study with no finished group trial."""
    return write_html(render_group_report(study, plotly_src=plotly_src), path)


def render_group_report(study: optuna.Study, *, plotly_src: str | None = None) -> str:
    g = group_view(study)
    if not g.trials:
        raise StorageError(
            f"group study {g.name!r} has no finished group trial yet: nothing to report "
            f"(fix: run `autotune run -f GROUP.yaml --study {g.name}` first)"
        )
    sections = [
        Section("summary", "Summary", _summary(g)),
        Section("trials", "Group trials", _trial_table(g)),
        Section("split", "The split over trials", figure_html(_split_figure(g), "plot-split")),
    ]
    for i, name in enumerate(g.names):
        sections.append(Section(f"model-{name}", f"Model {name}", _model_section(g, name, i)))
    generated = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}"
    return page(
        f"autotune group study {g.name}",
        f"generated by vllm-autotune on {generated}; {len(g.names)} models on one server, "
        "minimize the group objective (each model's objective metric over its own figure in the "
        "baseline group; the baseline group scores 1.0)",
        sections,
        plots=True,
        plotly_src=plotly_src,
    )


def _split_text(split: Mapping[str, float]) -> str:
    return "/".join(f"{v:.2f}" for v in split.values())


def _summary(g: GroupView) -> str:
    rows: list[list[str]] = [["budget", g.budget or "-"]]
    for name in g.names:
        a = g.about.get(name, {})
        parts = [a[p] for p in ("model", "workload", "space", "tuned", "weight") if a.get(p)]
        rows.append([f"model {name}", "; ".join(parts) or "-"])
    counts = {s: sum(t.status == s for t in g.trials) for s in ("ok", "failed", "infeasible")}
    rows.append(
        [
            "group trials",
            f"{len(g.trials)}: {counts['ok']} measured, {counts['failed']} failed, "
            f"{counts['infeasible']} infeasible (failed before launch or missed a constraint)",
        ]
    )
    base, best = g.baseline, g.best
    if base is not None:
        rows.append(
            [
                "baseline group",
                f"trial {base.number}, split {_split_text(base.split)} ({', '.join(base.split)})",
            ]
        )
    if best is not None:
        ratios = ", ".join(f"{n} {r:.3f}" for n, r in best.ratios.items())
        rows.append(
            [
                "best group",
                f"trial {best.number}, group objective {best.value:.3f} ({ratios}), "
                f"split {_split_text(best.split)}",
            ]
        )
    for number, c in sorted(g.confirmations.items()):
        verdict = "confirmed" if c.get("confirmed") else "not confirmed"
        rows.append([f"re-measured trial {number}", f"{verdict}: {c.get('why', '')}"])
    return facts_table([(str(k), str(v)) for k, v in rows])


def _row_class(g: GroupView, t: GroupTrialView) -> str:
    best = g.best
    if best is not None and t.number == best.number:
        return "best"
    return "baseline" if t.kind == "baseline" else ""


def _trial_table(g: GroupView) -> str:
    headers = [
        "#", "kind", "status", *(f"{n} share" for n in g.names), "group objective",
        *(f"{n} ratio" for n in g.names), "reason",
    ]  # fmt: skip
    rows = []
    for t in g.trials:
        rows.append(
            [
                Cell(str(t.number), sort=float(t.number), css="n"),
                Cell(t.kind),
                Cell(t.status, css=t.status),
                *(Cell.num(t.split.get(n), "{:.3f}") for n in g.names),
                Cell.num(t.value, "{:.3f}"),
                *(Cell.num(t.ratios.get(n), "{:.3f}") for n in g.names),
                Cell(t.reason[:200], css="evidence", title=t.reason[:2000]),
            ]
        )
    note = (
        "<p class='note'>Each trial is the whole group: every engine started, every workload replayed at "
        "once. A model's ratio is its objective metric over its own figure in the baseline group (below "
        "1 is better); the group objective is the study's group_objective (pareto: the weighted geometric "
        "mean of the ratios; worst: the worst weighted ratio; weighted_sum: their weighted mean). "
        "Highlighted: <span style='background:#f3f8ff'>baseline group</span>, "
        "<span style='background:#eefbf1'>best</span>.</p>"
    )
    table = table_html(
        headers, rows, sortable=True, row_classes=[_row_class(g, t) for t in g.trials], table_id="group-table"
    )
    return note + '<div class="wide">' + table + "</div>"


def _split_figure(g: GroupView) -> go.Figure:
    """Each trial's split as stacked bars (one colour per model), the group objective over it."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = [t.number for t in g.trials]
    for i, name in enumerate(g.names):
        fig.add_trace(
            go.Bar(
                x=x,
                y=[t.split.get(name, 0.0) for t in g.trials],
                name=f"{name} share",
                marker_color=_COLORS[i % len(_COLORS)],
                hovertext=[f"trial {t.number} ({t.kind}, {t.status})" for t in g.trials],
            ),
            secondary_y=False,
        )
    measured = [t for t in g.trials if t.value is not None]
    fig.add_trace(
        go.Scatter(
            x=[t.number for t in measured],
            y=[t.value for t in measured],
            mode="lines+markers",
            name="group objective",
            line={"color": "#1f2328"},
            marker={"size": 9},
        ),
        secondary_y=True,
    )
    failed = [t for t in g.trials if t.value is None]
    if failed:
        fig.add_trace(
            go.Scatter(
                x=[t.number for t in failed],
                y=[1.02 for _ in failed],
                mode="markers",
                name="failed or infeasible",
                marker={"symbol": "x", "color": "#d62728", "size": 10},
                hovertext=[t.reason[:300] for t in failed],
            ),
            secondary_y=False,
        )
    fig.update_layout(
        barmode="stack", title="Each model's share of the budget, and the group objective", **_LAYOUT
    )
    fig.update_xaxes(title_text="group trial", dtick=1)
    fig.update_yaxes(title_text="share of the budget", range=[0, 1.05], secondary_y=False)
    fig.update_yaxes(title_text="group objective (baseline = 1)", secondary_y=True)
    return fig


def _model_section(g: GroupView, name: str, index: int) -> str:
    metric = g.metric(name)
    a = g.about.get(name, {})
    facts = ", ".join(a[p] for p in ("model", "workload") if a.get(p))
    note = (
        f"<p class='note'>{esc(facts)}. Objective metric {esc(metric)}; its ratio is to its figure in "
        "the baseline group. Latencies in ms.</p>"
    )
    figure_cols = [c for c in _MODEL_FIGURES if c[0] != metric]
    param_names = sorted({p for t in g.trials for p in t.params.get(name, {})})
    headers = [
        "#", "kind", "share", "status", metric, "ratio", *(h for _, h, _ in figure_cols), *param_names,
        "saturated", "reason",
    ]  # fmt: skip
    rows = []
    for t in g.trials:
        rec = t.models.get(name) or {}
        figures = rec.get("figures") or {}
        why = str(rec.get("reason") or rec.get("failure") or "")
        own = t.params.get(name, {})
        rows.append(
            [
                Cell(str(t.number), sort=float(t.number), css="n"),
                Cell(t.kind),
                Cell.num(t.split.get(name), "{:.3f}"),
                Cell(str(rec.get("status") or t.status), css="ok" if rec.get("status") == "ok" else "failed"),
                Cell.num(_num(figures.get(metric)), "{:,.2f}"),
                Cell.num(t.ratios.get(name), "{:.3f}"),
                *(Cell.num(_num(figures.get(k)), fmt) for k, _, fmt in figure_cols),
                *(Cell(str(own[p])) if p in own else Cell("-") for p in param_names),
                Cell("yes" if rec.get("saturated") else ""),
                Cell(why[:200], css="evidence", title=why[:2000]),
            ]
        )
    table = table_html(
        headers,
        rows,
        sortable=True,
        row_classes=[_row_class(g, t) for t in g.trials],
        table_id=f"model-table-{name}",
    )
    return note + '<div class="wide">' + table + "</div>" + _model_plot(g, name, metric, index)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _model_plot(g: GroupView, name: str, metric: str, index: int) -> str:
    """The model's objective metric against its share: where its KV memory buys it something."""
    points = [
        (t, _num(((t.models.get(name) or {}).get("figures") or {}).get(metric)))
        for t in g.trials
        if (t.models.get(name) or {}).get("status") == "ok"
    ]
    points = [(t, v) for t, v in points if v is not None]
    if not points:
        return f"<p class='note'>Not shown: no group trial measured {esc(name)}.</p>"
    fig = go.Figure()
    for kind, symbol in (("baseline", "diamond"), ("prior", "star"), ("sampled", "circle")):
        chosen = [(t, v) for t, v in points if t.kind == kind]
        if chosen:
            fig.add_trace(
                go.Scatter(
                    x=[t.split.get(name) for t, _ in chosen],
                    y=[v for _, v in chosen],
                    mode="markers",
                    name=kind,
                    marker={"symbol": symbol, "size": 11, "color": _COLORS[index % len(_COLORS)]},
                    text=[f"trial {t.number}" for t, _ in chosen],
                )
            )
    fig.update_layout(title=f"{name}: {metric} against its share", **_LAYOUT)
    fig.update_xaxes(title_text=f"{name}'s share of the budget")
    fig.update_yaxes(title_text=f"{metric}" + ("" if metric.endswith("throughput") else " (ms)"))
    return figure_html(fig, f"plot-model-{name}")
