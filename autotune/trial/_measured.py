"""What a trial's engine measured (before it becomes a record), and the words for a replay that
served nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.bench import MetricsDelta, RequestTiming, TrialFigures
from autotune.engine import ConnectorHits
from autotune.space import RenderedConfig
from autotune.study import Figures

__all__ = ["Measured", "config_key", "no_success_reason"]


@dataclass(frozen=True)
class Measured:
    """What one engine's replays measured, before it becomes a record."""

    figures: TrialFigures
    metrics: MetricsDelta | None
    phase: dict[str, float]
    timings: tuple[RequestTiming, ...]
    summaries: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    pruned: str | None
    connector: ConnectorHits | None = None  # what the KV connector's own log says it served
    extra_figures: Mapping[str, Any] = field(default_factory=dict)  # a capacity trial's bracket and levels


def config_key(rendered: RenderedConfig) -> tuple[object, ...]:
    return (tuple(rendered.args), tuple(sorted(rendered.env.items())))


def no_success_reason(figures: Figures) -> str:
    """Why a replay served nothing, from the failed requests' own answers."""
    failures = figures.failures
    if not failures:
        return f"no request succeeded ({figures.failed} failed)"
    top, count = next(iter(failures.items()))
    return f"no request succeeded: {count} of {figures.failed} failed with {top}"
