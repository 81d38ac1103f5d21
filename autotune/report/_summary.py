"""The summary at the top of a study report: what ran on what, baseline vs best, the
confirmation verdict and the exported command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.errors import ExportError
from autotune.metrics import METRICS, REPORTED, shown_in, unit
from autotune.report._data import StudyFacts, TrialRow
from autotune.report._html import Cell, esc, table_html
from autotune.report._plots import params_text
from autotune.study import baseline_saturation, saturation_summary

__all__ = ["facts_table", "summary_html"]

_COMPARED = shown_in(REPORTED)


def _unit(metric: str) -> str:
    return " " + unit(metric)


def _fmt(metric: str, value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}{_unit(metric)}"


def facts_table(rows: Sequence[tuple[str, str]]) -> str:
    out = ['<table class="facts"><tbody>']
    out += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows]
    out.append("</tbody></table>")
    return "".join(out)


def _flatten(facts: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in facts.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += _flatten(value, f"{name}.")
        elif isinstance(value, float):
            out.append((name, f"{value:,.4g}"))
        elif isinstance(value, int) and not isinstance(value, bool):
            out.append((name, f"{value:,}"))
        elif isinstance(value, list | tuple):
            out.append((name, ", ".join(str(v) for v in value) or "-"))
        else:
            out.append((name, "-" if value is None else str(value)))
    return out


def _workload_rows(w: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The facts of ``workload inspect`` that explain a result; any other mapping is shown whole."""
    if "requests" not in w or "prompt_tokens" not in w:
        return _flatten(w)

    def stats(key: str) -> str:
        d = w.get(key) or {}
        return f"p50 {d.get('p50', 0):,.0f}, p90 {d.get('p90', 0):,.0f}, max {d.get('max', 0):,} (total {d.get('total', 0):,})"

    rate = w.get("mean_rate")
    rows = [
        ("file", str(w.get("path", "-"))),
        (
            "requests",
            f"{w['requests']:,} ({w.get('chat_requests', 0):,} chat, {w.get('sessions', 0):,} sessions)",
        ),
        (
            "arrivals",
            f"{rate:.2f} req/s over {w.get('duration_s') or 0:.1f} s (before any --speed)"
            if rate
            else "no timestamps",
        ),
        ("prompt tokens", stats("prompt_tokens")),
        ("output tokens (max_tokens)", stats("output_tokens")),
        ("largest prompt + output", f"{w.get('max_sequence_tokens', 0):,} tokens"),
        (
            f"prefix reuse (block {w.get('block_size', '?')})",
            f"{float(w.get('prefix_reuse') or 0):.0%} of prompt tokens (upper bound of the hit rate)",
        ),
        ("working set", f"{int(w.get('working_set_tokens') or 0):,} tokens (distinct prefix blocks)"),
        (
            "tokens counted by",
            str(w.get("tokenizer", "-")) + ("" if w.get("tokens_exact", True) else " (approximate)"),
        ),
    ]
    return rows


def summary_html(
    study: optuna.Study,
    facts: StudyFacts,
    workload: Mapping[str, Any] | None,
    fingerprints: Mapping[str, Mapping[str, Any]] | None,
) -> str:
    counts = facts.counts()
    rows = [
        ("study", facts.name),
        ("objective", f"{facts.direction} {facts.objective}"),
        ("trials", ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))),
        ("engine", facts.engine or "not recorded"),
        ("engine profile", facts.engine_profile or "not recorded"),
        ("model", facts.model or "not recorded"),
        ("fixed flags", " ".join(facts.fixed_flags) or "none"),
        ("tuned parameters", ", ".join(facts.param_names) or "none"),
    ]
    base = facts.baseline
    fig = base.record.figures if base is not None else None
    if fig is not None:
        sched = fig.raw.get("schedule_note") or "on schedule"
        duration = fig.raw.get("duration_s")
        rows.append(
            (
                "replay (baseline)",
                f"{fig.completed + fig.failed} requests over "
                + (f"{float(duration):.1f} s" if duration is not None else "? s")
                + f"; {sched}",
            )
        )
    parts = [facts_table(rows)]
    if not facts.measured:
        parts.insert(
            0,
            '<p class="failed"><b>No trial was measured</b>: every trial failed or was infeasible. '
            "The trial table says why (failure class and evidence).</p>",
        )
    saturated = _saturation_lines(study, facts)
    if saturated:
        parts.insert(0, "".join(f'<p class="failed"><b>Saturated</b>: {esc(line)}</p>' for line in saturated))
    if workload:
        parts.append("<h3>Workload</h3>" + facts_table(_workload_rows(workload)))
    for group, values in (fingerprints or {}).items():
        parts.append(f"<h3>{esc(group)} fingerprint</h3>" + facts_table(_flatten(values)))
    parts.append(_baseline_vs_best(facts))
    parts.append(_confirmation(facts))
    parts.append(_exported(study, facts))
    return "".join(parts)


def _saturation_lines(study: optuna.Study, facts: StudyFacts) -> list[str]:
    """That the baseline, or every trial, saturated the server (the trial table flags each one)."""
    lines = [saturation_summary(study) or ""]
    if facts.baseline is not None and not lines[0]:
        lines.append(baseline_saturation(facts.baseline.record) or "")
    return [line for line in lines if line]


def _baseline_vs_best(facts: StudyFacts) -> str:
    base, best = facts.baseline, facts.best
    if base is None and best is None:
        return "<h3>Baseline vs best</h3><p class='note'>No baseline and no feasible trial.</p>"
    head = "<h3>Baseline vs best (one measurement each)</h3>" + "".join(
        f"<p class='note'>{note}</p>" for note in _pairing_notes(base, best)
    )
    labels = [
        "figure",
        f"baseline (#{base.number})" if base else "baseline",
        f"best (#{best.number})" if best else "best",
    ]
    config = ""
    if best is not None:
        config = f"<p>Best configuration: <code>{esc(params_text(best, facts.param_formats))}</code></p>"
    return head + config + table_html([*labels, "best / baseline"], _figure_rows(facts.objective, base, best))


def _pairing_notes(base: TrialRow | None, best: TrialRow | None) -> list[str]:
    """What the table's two columns are, where they are not vLLM's defaults and a better trial."""
    notes = []
    if base is None:
        notes.append("No baseline was measured: the gain over vLLM's defaults is unknown.")
    elif base.record.reference:
        notes.append(f"Baseline: reference {esc(base.record.reference)} (vLLM's defaults do not fit).")
    if best is None:
        notes.append("No feasible trial: nothing beat the constraints.")
    elif base is not None and best.number == base.number:
        notes.append("The baseline is the best feasible trial.")
    return notes


def _figure_rows(objective: str, base: TrialRow | None, best: TrialRow | None) -> list[list[Cell | str]]:
    """The objective, then each reported figure: baseline, best, their ratio; the hit rate last."""
    rows: list[list[Cell | str]] = []
    for m in [objective, *(m for m in _COMPARED if m != objective)]:
        b = base.figure(m) if base else None
        t = best.figure(m) if best else None
        if b is None and t is None:
            continue
        ratio = f"{t / b:.2f}x" if b and t is not None else "-"
        rows.append([m, Cell(_fmt(m, b), css="n"), Cell(_fmt(m, t), css="n"), Cell(ratio, css="n")])
    hb = base.prefix_hit_rate if base else None
    ht = best.prefix_hit_rate if best else None
    if hb is not None or ht is not None:
        rows.append([METRICS["prefix_hit_rate"].label, _pct(hb), _pct(ht), ""])
    return rows


def _pct(v: float | None) -> Cell:
    return Cell("-" if v is None else f"{v:.0%}", css="n")


def _confirmation(facts: StudyFacts) -> str:
    c = facts.confirmation
    out = "<h3>Confirmation</h3>"
    if facts.best is None or facts.baseline is None or facts.best.number == facts.baseline.number:
        return (
            out
            + "<p class='note'>Nothing to confirm (no baseline, no feasible trial, or the baseline is best).</p>"
        )
    if not c:
        return out + (
            "<p class='note'>The best was not re-measured against the baseline (run with --confirm-rounds N): "
            "its gain is one measurement, without a noise band.</p>"
        )
    verdict = (
        "confirmed"
        if c.get("confirmed")
        else "inconclusive: the baseline is what run exported"
        if c.get("inconclusive")
        else "not confirmed: the baseline is what run exported"
    )
    comp = c.get("comparison") or {}
    # the doubts the console and the export carry: runs behind their schedule, runs that disagree
    doubts = list(comp.get("disagreeing") or [])
    if c.get("late_runs"):
        doubts.insert(
            0,
            f"{c['late_runs']} of {c.get('runs', '?')} confirmation runs fell behind their schedule, so their "
            "figures are unreliable",
        )
    css = "ok" if c.get("confirmed") and not doubts else "infeasible" if c.get("confirmed") else "failed"
    out += f"<p class='{css}'><b>{esc(verdict)}</b>: {esc(c.get('why', ''))}</p>"
    out += "".join(f"<p class='infeasible'>doubt: {esc(d)}</p>" for d in doubts)
    a, b = comp.get("a") or {}, comp.get("b") or {}
    figures = [m for m in (facts.objective, *_COMPARED) if m in (a.get("median") or {})]
    figures = list(dict.fromkeys(figures))
    rows: list[list[Cell | str]] = [
        [m, _arm_cell(m, a), _arm_cell(m, b), Cell(_ratio(a, b, m), css="n")] for m in figures
    ]
    head = [
        "figure (alternately re-measured)",
        f"{a.get('name', 'A')}: median [min-max] (runs)",
        f"{b.get('name', 'B')}: median [min-max] (runs)",
        "B / A",
    ]
    return out + table_html(head, rows)


def _arm_cell(metric: str, arm: Mapping[str, Any]) -> Cell:
    median = (arm.get("median") or {}).get(metric)
    spread = (arm.get("spread") or {}).get(metric)
    values = (arm.get("values") or {}).get(metric) or []
    if median is None:
        return Cell("-", css="n")
    text = _fmt(metric, float(median))
    if spread:
        text += f" [{float(spread[0]):,.1f}-{float(spread[1]):,.1f}]"
    return Cell(f"{text} ({len(values)})", sort=float(median), css="n")


def _ratio(a: Mapping[str, Any], b: Mapping[str, Any], metric: str) -> str:
    ma, mb = (a.get("median") or {}).get(metric), (b.get("median") or {}).get(metric)
    return f"{float(mb) / float(ma):.2f}x" if ma and mb is not None else "-"


def _exported(study: optuna.Study, facts: StudyFacts) -> str:
    from autotune.export import export_best

    out = "<h3>Exported command</h3>"
    chosen = facts.best
    note = ""
    if chosen is not None and facts.confirmation and not facts.confirmation.get("confirmed"):
        chosen, note = facts.baseline, "the best was not confirmed, so the baseline is exported"
    frozen = None
    if chosen is not None:
        frozen = next((t for t in study.get_trials(deepcopy=False) if t.number == chosen.number), None)
    try:
        trial, exported = export_best(study, out=None, trial=frozen)
    except ExportError as exc:
        return out + f"<p class='failed'>Nothing to export: {esc(exc)}</p>"
    note = note or f"trial {trial.number}"
    return (
        out
        + f"<p class='note'>{esc(note)}; the command that was measured:</p><pre>{esc(exported.command)}</pre>"
    )
