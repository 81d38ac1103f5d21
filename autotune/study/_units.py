"""A figure with its unit, as every console line, export header and report prints it."""

from __future__ import annotations

__all__ = ["figure_text", "unit"]


def unit(metric: str) -> str:
    """The unit a figure is in: ms for latencies, tok/s or req/s for rates."""
    if metric.endswith("throughput"):
        return "tok/s"
    return "req/s" if metric in ("goodput", "capacity") else "ms"


def figure_text(value: float | None, metric: str) -> str:
    """A figure with its unit, never in exponent form: ``63.4 ms``, ``200.3 s`` (not ``2.003e+05``);
    ``-`` for no figure."""
    if value is None:
        return "-"
    u = unit(metric)
    if u == "ms" and abs(value) >= 10_000:
        value, u = value / 1000, "s"
    return f"{value:.1f} {u}" if abs(value) >= 10 else f"{value:.3g} {u}"
