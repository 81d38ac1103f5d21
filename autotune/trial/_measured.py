"""What a trial's engine measured (before it becomes a record), and the words for a replay that
served nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.bench import MetricsDelta, RequestTiming, TrialFigures
from autotune.bench._prometheus import MetricsSnapshot
from autotune.engine import ConnectorHits
from autotune.space import RenderedConfig
from autotune.study import Figures
from autotune.trial._passes import PassResult, combine_passes, reset_leak

__all__ = ["Measured", "PassRun", "config_key", "no_success_reason"]


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


@dataclass
class PassRun:
    """What the passes of one engine left: each pass, every request's timing, the notes, and the
    engine's counters before the first pass and after the last."""

    first: MetricsSnapshot | None
    last: MetricsSnapshot | None = None
    passes: list[PassResult] = field(default_factory=list)
    timings: list[RequestTiming] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def measured(
        self,
        *,
        metrics: MetricsDelta | None,
        phase: dict[str, float],
        objective_metric: str,
        connector: ConnectorHits | None,
        fallback: str | None,
    ) -> Measured:
        """The passes combined, with the notes on them: the connector's hits, a kernel fallback,
        a leak across the cache resets, a schedule fallen behind, a saturated server."""
        notes = self.notes
        if connector is not None:
            notes.append(connector.describe())
        if fallback is not None:
            notes.append(fallback)
        summaries = tuple(p.summary(objective_metric) for p in self.passes)
        leak = reset_leak(summaries)
        if leak is not None:
            notes.append(leak)
        figures = combine_passes([p.figures for p in self.passes])
        if figures.behind_schedule and figures.schedule_note:
            notes.append(figures.schedule_note)
        if figures.saturated and figures.saturation_note:
            notes.append(figures.saturation_note)
        return Measured(
            figures=figures,
            metrics=metrics,
            phase=phase,
            timings=tuple(self.timings),
            summaries=summaries,
            notes=tuple(notes),
            pruned=self.passes[-1].pruned if self.passes else None,
            connector=connector,
        )


def config_key(rendered: RenderedConfig) -> tuple[object, ...]:
    return (tuple(rendered.args), tuple(sorted(rendered.env.items())))


def no_success_reason(figures: Figures) -> str:
    """Why a replay served nothing, from the failed requests' own answers."""
    failures = figures.failures
    if not failures:
        return f"no request succeeded ({figures.failed} failed)"
    top, count = next(iter(failures.items()))
    return f"no request succeeded: {count} of {figures.failed} failed with {top}"
