"""The metric registry: every figure's name, direction, unit, label and source, in one place."""

from __future__ import annotations

from autotune.metrics._registry import (
    COMPARED,
    COSTS,
    METRICS,
    PERCENTILES,
    REPORTED,
    Metric,
    Source,
    figure_text,
    figure_value,
    latency_figures,
    maximized,
    objective_help,
    rate_figures,
    shown_in,
    unit,
)

__all__ = [
    "COMPARED",
    "COSTS",
    "METRICS",
    "PERCENTILES",
    "REPORTED",
    "Metric",
    "Source",
    "figure_text",
    "figure_value",
    "latency_figures",
    "maximized",
    "objective_help",
    "rate_figures",
    "shown_in",
    "unit",
]
