"""The nights of a study in its report: one row per night, and each night's plan, re-measurement
runs, candidates and decision. Reads the records the nightly command keeps in the study
(``night:NNNN`` study attributes, plain mappings), so a study that only ever ran nights has a
report too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.report._html import Cell, esc, table_html
from autotune.study import figure_text, unit

__all__ = ["figure_text", "night_html", "nights_html", "nights_of", "unit"]

_PREFIX = "night:"


def nights_of(study: optuna.Study) -> list[Mapping[str, Any]]:
    """The study's night records, oldest first."""
    found = [v for k, v in study.user_attrs.items() if k.startswith(_PREFIX) and isinstance(v, Mapping)]
    return sorted(found, key=lambda n: int(n.get("number") or 0))


def _fig(f: Mapping[str, Any] | None) -> Cell:
    if not f or f.get("median") is None:
        return Cell("-", css="n")
    return Cell(f"{f['median']:,.1f} [{f['low']:,.1f}-{f['high']:,.1f}]", sort=float(f["median"]), css="n")


def _band(n: Mapping[str, Any]) -> str:
    band = n.get("noise_band")
    return "unknown" if band is None else f"{band * 100:.2g}%"


def _decision(n: Mapping[str, Any]) -> str:
    text = str(n.get("decision") or "")
    return text + (f" #{n['promoted_trial']}" if n.get("promoted_trial") is not None else "")


def nights_html(nights: Sequence[Mapping[str, Any]]) -> str:
    """One row per night, the latest first."""
    if not nights:
        return "<p class='note'>No night has run on this study.</p>"
    metric = str(nights[-1].get("metric") or "objective")
    rows = [
        [
            Cell(str(n.get("number")), sort=float(n.get("number") or 0), css="n"),
            Cell(str(n.get("date") or "")[:16]),
            Cell(str(n.get("incumbent_label") or "")),
            _fig(n.get("incumbent_figure")),
            _fig(n.get("baseline_figure")),
            Cell(_band(n), css="n"),
            Cell("YES" if n.get("regression") else "no", css="failed" if n.get("regression") else ""),
            Cell(_decision(n)),
            Cell(str(n.get("trials", 0)), css="n"),
            Cell(f"{float(n.get('duration_s') or 0) / 60:.1f} / {float(n.get('budget_s') or 0) / 60:.1f}"),
            Cell(str(n.get("reason") or "")),
        ]
        for n in reversed(nights)
    ]
    headers = [
        "night",
        "date",
        "incumbent",
        f"incumbent {metric} ({unit(metric)})",
        f"baseline ({unit(metric)})",
        "noise band",
        "regression",
        "decision",
        "trials",
        "min used / budget",
        "why",
    ]
    return table_html(headers, rows, sortable=True)


def night_html(n: Mapping[str, Any]) -> str:
    """One night: its plan, what changed, the re-measurement runs, the candidates and the decision."""
    metric = str(n.get("metric") or "objective")
    plan = n.get("plan") or {}
    parts = [f"<h3>Night {esc(n.get('number'))} ({esc(n.get('date'))})</h3>", "<h3>Plan</h3>"]
    lines = plan.get("lines") or ["(this night recorded no plan)"]
    parts.append("<pre>" + esc("\n".join(str(x) for x in lines)) + "</pre>")
    changed = list(n.get("workload_changes") or []) + list(n.get("changes") or [])
    if changed:
        parts.append("<h3>What changed</h3><ul>" + "".join(f"<li>{esc(c)}</li>" for c in changed) + "</ul>")
    parts.append("<h3>Re-measurement and promotion runs</h3>")
    parts.append(_runs_table(n.get("runs") or [], metric))
    parts.append(f"<p class='note'>{esc(_band_line(n))}</p>")
    parts.append("<h3>Candidates</h3>")
    parts.append(_candidates_table(n.get("candidates") or [], metric))
    parts.append("<h3>Decision</h3>")
    verdict = "REGRESSION: " if n.get("regression") else "No regression: "
    parts.append(f"<p>{esc(verdict + str(n.get('regression_reason') or ''))}</p>")
    parts.append(f"<p><b>{esc(_decision(n))}</b>: {esc(n.get('reason') or '')}</p>")
    return "\n".join(parts)


def _band_line(n: Mapping[str, Any]) -> str:
    source = n.get("band_source") or ""
    return f"noise band {_band(n)}" + (f" ({source})" if source else "")


def _runs_table(runs: Sequence[Mapping[str, Any]], metric: str) -> str:
    if not runs:
        return "<p class='note'>No engine run was recorded for the re-measurement.</p>"
    rows = [
        [
            Cell(str(r.get("phase") or "")),
            Cell(str(r.get("arm") or "")),
            Cell(str(r.get("round") or ""), css="n"),
            Cell(str(r.get("status") or ""), css=str(r.get("status") or "")),
            Cell.num(r.get("value")),
            Cell.num(r.get("pass_spread"), "{:.1%}"),
            Cell.num(r.get("startup_s"), "{:.0f}"),
            Cell(str(r.get("reason") or "")),
        ]
        for r in runs
    ]
    return table_html(
        [
            "phase",
            "arm",
            "round",
            "status",
            f"{metric} ({unit(metric)})",
            "passes' spread",
            "start-up s",
            "why",
        ],
        rows,
    )


def _candidates_table(cands: Sequence[Mapping[str, Any]], metric: str) -> str:
    if not cands:
        return "<p class='note'>No trial ran tonight.</p>"
    rows = []
    for c in cands:
        status = str(c.get("status") or "")
        if c.get("baseline"):
            status += " (baseline)"
        if c.get("reused") is not None:
            status += f" (reuses #{c['reused']})"
        params = ", ".join(f"{k}={v}" for k, v in (c.get("params") or {}).items()) or "defaults"
        rows.append(
            [
                Cell(str(c.get("number")), sort=float(c.get("number") or 0), css="n"),
                Cell(status, css=str(c.get("status") or "")),
                Cell(params),
                Cell.num(c.get("value")),
                Cell("yes" if c.get("feasible") else "no"),
                Cell(str(c.get("reason") or "")),
            ]
        )
    return table_html(
        ["trial", "status", "parameters", f"{metric} ({unit(metric)})", "feasible", "why"], rows
    )
