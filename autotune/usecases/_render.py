"""Rendering for the terminal: trial lines, the study table, parameter values with their units.

Packages return data; this module turns it into rich text. Nothing here measures or writes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna
from rich.markup import escape
from rich.table import Table

from autotune.metrics import unit
from autotune.study import TrialRecord, TrialReport, baseline_what, read_record
from autotune.tuning import FORMATS_ATTR

if TYPE_CHECKING:
    from autotune.report import GroupView  # plotly: imported only where a page is drawn

__all__ = ["FORMATS_ATTR", "fmt_params", "fmt_value", "group_table", "study_table", "trial_line"]


def fmt_value(metric: str, value: float | None) -> str:
    if value is None or math.isnan(value) or abs(value) >= 1e11:
        return "-"
    suffix = "/s" if unit(metric).endswith("/s") else " ms"
    return f"{value:.1f}{suffix}"


def _one(name: str, value: Any, formats: Mapping[str, str]) -> str:
    fmt = formats.get(name)
    if fmt:
        shown = fmt.format(value)
    elif isinstance(value, float):
        shown = f"{value:.3g}"
    else:
        shown = str(value)
    return f"{name}={shown}"


def fmt_params(params: Mapping[str, Any], formats: Mapping[str, str] | None = None, sep: str = " ") -> str:
    if not params:
        return "vLLM defaults"
    return sep.join(_one(k, v, formats or {}) for k, v in params.items())


def _what(
    rec: TrialRecord, params: Mapping[str, Any], formats: Mapping[str, str], sep: str, study: optuna.Study
) -> str:
    if rec.baseline:
        return "baseline: " + baseline_what(study, rec.reference)
    return fmt_params(params, formats, sep)


def trial_line(rep: TrialReport, metric: str) -> str:
    rec = rep.record
    head = f"  trial #{rep.number} {rec.status.value}"
    if rec.duplicate_of is not None:
        head += f" (same config as #{rec.duplicate_of}: measurement reused)"
    body = (_measured(rep, metric) if rec.ok else _why_not(rec)) + forecast_note(rec, metric)
    best = (
        f" | best so far: #{rep.best_number} {fmt_value(metric, rep.best_value)}"
        if rep.best_number is not None
        else " | no feasible trial yet"
    )
    return head + ": " + body + best


def forecast_note(rec: TrialRecord, metric: str) -> str:
    """The latency model's prediction beside the measurement (``--predict``): `` | predicted 41.2 ms
    [30.1-52.3], measured +8%``; a vetoed trial's reason holds its numbers already."""
    fc = rec.forecast
    if not fc or fc.get("verdict") == "veto" or "predicted_ms" not in fc:
        return ""
    lo, hi = fc.get("interval_ms") or (math.nan, math.nan)
    out = f" | predicted {fc['predicted_ms']:.1f} ms [{lo:.1f}-{hi:.1f}]"
    measured = rec.metric(metric) if rec.ok else None
    if measured is not None and fc["predicted_ms"] > 0:
        out += f", measured {measured / fc['predicted_ms'] - 1:+.0%}"
    if fc.get("verdict") == "audit":
        out += " (audit: predicted worse than the best, started anyway)"
    return out


def _why_not(rec: TrialRecord) -> str:
    """A trial that measured nothing: its failure class and the first clause of its reason."""
    reason = (rec.reason or "").split(";")[0]
    failure = rec.failure if rec.failure != rec.status.value else None  # not "pruned: pruned"
    return f"[red]{failure}[/red] {reason}" if failure else reason


def _measured(rep: TrialReport, metric: str) -> str:
    """The objective's figure, TTFT p50 (unless it is the objective), throughput, failures, the
    prefix-hit share, the passes, and what makes the figure doubtful."""
    rec = rep.record
    f = rec.figures
    hit = rec.metrics.prefix_hit_rate if rec.metrics else None
    ttft50 = f.get("ttft_p50") if f else None
    also = "" if metric == "ttft_p50" else f"ttft_p50={fmt_value('ttft_p50', ttft50)} "  # not twice
    head_figure = (
        capacity_text(f.raw)
        if metric == "capacity" and f is not None
        else f"{metric}={fmt_value(metric, rep.value)}"
    )
    return (
        f"{head_figure} {also}"
        f"out={f.output_throughput if f else math.nan:.1f} tok/s failed={f.failed if f else 0}"
        + (f" prefix-hit={hit:.0%}" if hit is not None else "")
        + _passes_note(rec, metric).replace("\n", " (")
        + (")" if rec.pass_spread(metric) is not None else "")
        + _first_failure(rec)
        + _doubts(rep)
    )


def _doubts(rep: TrialReport) -> str:
    """`` [yellow](violates a constraint)[/yellow]`` and the like: why the figure may not count."""
    f = rep.record.figures
    out = "" if rep.feasible else " [yellow](violates a constraint)[/yellow]"
    if f is not None and f.raw.get("behind_schedule"):
        out += " [yellow](replay behind schedule)[/yellow]"
    if f is not None and f.saturated:
        out += f" [red]({escape(f.saturation_note)})[/red]"
    return out


def capacity_text(raw: Mapping[str, Any]) -> str:
    """``capacity=14.2 req/s at 4x (broke at 15.9 req/s, 4.5x; 5 levels)``: the highest load that held
    its SLOs, as a multiple of the workload's arrivals, and the bracket's upper end."""
    held, x = raw.get("capacity"), raw.get("capacity_x")
    hi, hi_x = raw.get("capacity_hi"), raw.get("capacity_hi_x")
    levels = len(raw.get("capacity_levels") or ())
    if held is None:
        return "capacity=-"
    if not held:
        return f"capacity=0 req/s (no level held; {levels} levels)"
    upper = f"broke at {hi:.3g} req/s, {hi_x:.3g}x" if hi is not None else "none broke"
    return f"capacity={held:.3g} req/s at {x:.3g}x ({upper}; {levels} levels)"


def _first_failure(rec: TrialRecord) -> str:
    """`` [red](HTTP 400: ... (at w.jsonl:3, id 'q-empty'))[/red]``: why the commonest failed requests
    failed, naming the workload line the server refused; empty when every request succeeded."""
    failures = rec.figures.failures if rec.figures is not None and rec.figures.failed else {}
    return f" [red]({escape(next(iter(failures)))})[/red]" if failures else ""


def _passes_note(rec: TrialRecord, metric: str) -> str:
    """``\n3 passes ±4%``: how many replays the figure is the median of, and their spread."""
    spread = rec.pass_spread(metric)
    return f"\n{len(rec.passes)} passes ±{spread / 2:.0%}" if spread is not None else ""


def _predicted_note(rec: TrialRecord) -> str:
    """The prior's predicted prefix-hit share (with the pool, when there is one)."""
    p = rec.predicted
    pred = p.get("prefix_hit_with_pool", p.get("prefix_hit_gpu"))
    return f"\npred {pred:.0%}" if isinstance(pred, int | float) else ""


def _peak_gib(rec: TrialRecord) -> str:
    mem = rec.memory
    peak = max(mem.get("gpu_used_peak") or [0]) or mem.get("rss_peak") or 0
    return f"{peak / 2**30:.1f}" if peak else "-"


def study_table(study: optuna.Study, metric: str) -> Table:
    """Every trial: its configuration (one parameter per line, so it stays readable), figures,
    hit rates, KV tokens, peak memory and start-up time. The CPU offload column only where an
    offload pool exists (not on the CPU build)."""
    formats: Mapping[str, str] = study.user_attrs.get(FORMATS_ATTR) or {}
    cpu_build = study.user_attrs.get("engine_profile") == "cpu"
    table = Table(title=f"study {study.study_name}", show_lines=True)
    cols = ["#", "status", "configuration", metric, "ttft p50", "out tok/s", "prefix hit"]
    if not cpu_build:
        cols.append("CPU offload hit")
    cols += ["KV tokens", "peak mem GiB", "start s"]
    for col in cols:
        table.add_column(col, overflow="fold", no_wrap=col != "configuration")
    for t in study.get_trials(deepcopy=False):
        rec = read_record(t)
        row = [
            str(t.number),
            _status(t, rec),
            # a trial still queued (the prior's candidate) has its values in fixed_params until it runs
            _what(rec, t.params or t.system_attrs.get("fixed_params") or {}, formats, "\n", study),
            *_figure_cells(rec, metric, t.value),
        ]
        if not cpu_build:
            host = rec.metrics.host_hit_rate if rec.metrics else None
            row.append(f"{host:.0%}" if host is not None else "-")
        row += [
            f"{rec.kv_tokens:,}" if rec.kv_tokens else "-",
            _peak_gib(rec),
            f"{rec.startup_s:.0f}" if rec.startup_s is not None else "-",
        ]
        table.add_row(*row)
    return table


def _status(t: optuna.trial.FrozenTrial, rec: TrialRecord) -> str:
    """``failed (out_of_memory)``; Optuna's state for a trial that wrote no record (yet)."""
    if "status" not in t.user_attrs:
        return t.state.name.lower()
    status = rec.status.value
    return status + f" ({rec.failure})" if not rec.ok and rec.failure and rec.failure != status else status


def _figure_cells(rec: TrialRecord, metric: str, value: float | None) -> list[str]:
    """The objective (with its passes), TTFT p50, output throughput and the prefix-hit share."""
    f = rec.figures if rec.ok else None
    hit = rec.metrics.prefix_hit_rate if rec.metrics else None
    return [
        ((fmt_value(metric, value) + _passes_note(rec, metric)) if rec.ok else "-") + _forecast_cell(rec),
        fmt_value("ttft_p50", f.get("ttft_p50")) if f else "-",
        f"{f.output_throughput:.1f}" if f else "-",
        (f"{hit:.0%}" if hit is not None else "-") + _predicted_note(rec),
    ]


def _forecast_cell(rec: TrialRecord) -> str:
    """``\npred 41.2 ms [30-52]``: the latency model's prediction of the objective (``--predict``)."""
    fc = rec.forecast
    if "predicted_ms" not in fc:
        return ""
    lo, hi = fc.get("interval_ms") or (math.nan, math.nan)
    return f"\npred {fc['predicted_ms']:.1f} ms [{lo:.0f}-{hi:.0f}]"


def group_table(view: GroupView) -> Table:
    """A group study's trials: kind, status, the split, the group objective, and each model's
    objective figure with its ratio to the baseline group (its own parameters on the next lines)."""
    table = Table(title=f"group study {view.name} ({view.budget})", show_lines=True)
    cols = ["#", "kind", "status", "split " + "/".join(view.names), "group objective"]
    cols += [f"{n} {view.metric(n)} (ratio)" for n in view.names] + ["reason"]
    for col in cols:
        table.add_column(col, overflow="fold")
    for tr in view.trials:
        row = [
            str(tr.number),
            tr.kind,
            tr.status,
            "/".join(f"{tr.split.get(n, 0.0):.2f}" for n in view.names),
            f"{tr.value:.3f}" if tr.value is not None else "-",
        ]
        for n in view.names:
            rec = tr.models.get(n) or {}
            value = (rec.get("figures") or {}).get(view.metric(n))
            ratio = tr.ratios.get(n)
            shown = fmt_value(view.metric(n), value) if isinstance(value, int | float) else "-"
            shown += f" ({ratio:.3f})" if ratio is not None else ""
            own = fmt_params(tr.params.get(n) or {}, sep="\n") if tr.params.get(n) else ""
            row.append(shown + (f"\n{own}" if own else ""))
        row.append(tr.reason)
        table.add_row(*row)
    return table
