"""What one trial produced, typed, and how it is written to and read from a study.

The one module that knows the keys of a trial's ``user_attrs``. Everything else (the CLI's
tables, export, confirmation, reports, benchmarks) reads a :class:`TrialRecord`. Studies written
by earlier versions (no ``record_version`` attribute) read the same way: every key is optional.

The study never imports ``bench`` or ``engine``: figures and metrics arrive here as the plain
mappings their producers serialise (``TrialFigures.as_dict()``, ``MetricsDelta.as_dict()``) and
are read back through typed views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import optuna

from autotune.metrics import figure_value
from autotune.space import EngineConfig, RenderedConfig

__all__ = [
    "BASELINE_ATTR",
    "CONSTRAINTS_KEY",
    "FORECAST_ATTR",
    "RECORD_VERSION",
    "Evaluator",
    "Figures",
    "Metrics",
    "Prestarter",
    "TrialListener",
    "TrialRecord",
    "TrialStatus",
    "read_record",
    "store_constraints",
    "write_record",
]

RECORD_VERSION = 3  # 3: passes, notes, predicted; status pruned
BASELINE_ATTR = "baseline"
# the latency model's prediction, stored on the trial before it starts (``autotune.tuning``'s forecast
# gate); the record reads it, never writes it
FORECAST_ATTR = "forecast"
GROUP_FINGERPRINT_ATTR = "group_fingerprint"  # study attr: what a group study measures, hashed


class TrialStatus(StrEnum):
    OK = "ok"  # measured
    FAILED = "failed"  # the engine did not start or died, or no request succeeded; ``failure`` says why
    INFEASIBLE = "infeasible"  # rejected before launch (does not fit, bad flags)
    PRUNED = "pruned"  # stopped early, worse than the incumbent beyond the noise; partial figures


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Figures:
    """Client-side figures of one replay, as ``vllm bench serve`` defines them (times in ms)."""

    raw: Mapping[str, Any]

    def metric(self, name: str) -> float:
        """Any figure by name: ``ttft_p90``, ``tpot_mean``, ``output_throughput``, ``goodput``..."""
        return figure_value(self.raw, name)

    def get(self, name: str) -> float | None:
        """:meth:`metric`, or None when not measured (NaN or absent)."""
        try:
            value = self.metric(name)
        except KeyError:
            return None
        return None if math.isnan(value) else value

    @property
    def completed(self) -> int:
        return int(self.raw.get("completed") or 0)

    @property
    def failed(self) -> int:
        return int(self.raw.get("failed") or 0)

    @property
    def output_throughput(self) -> float:
        return _num(self.raw.get("output_throughput"))

    @property
    def saturated(self) -> bool:
        """The server could not keep up with the arrivals: the figures measure its queue."""
        return bool(self.raw.get("saturated"))

    @property
    def saturation_note(self) -> str:
        """The evidence of saturation and its fix, in one line (empty when not saturated)."""
        return str(self.raw.get("saturation_note") or "")

    @property
    def failures(self) -> Mapping[str, int]:
        """Failed requests by reason (HTTP status and the first line of the body), most common first."""
        return dict(self.raw.get("failures") or {})

    def as_dict(self) -> dict[str, Any]:
        return dict(self.raw)


@dataclass(frozen=True)
class Metrics:
    """What the engine's ``/metrics`` counted during the measured replay."""

    raw: Mapping[str, float | None]

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.raw.get("prefix_hit_rate")

    @property
    def host_hit_rate(self) -> float | None:
        return self.raw.get("host_hit_rate")

    def as_dict(self) -> dict[str, float | None]:
        return dict(self.raw)


@dataclass(frozen=True)
class TrialRecord:
    """One trial: what was launched, what it measured, or why it did not."""

    status: TrialStatus
    command: tuple[str, ...] = ()  # the full argv that was (or would have been) launched
    rendered_args: tuple[str, ...] = ()  # the tuned flags only (the baseline's are empty)
    rendered_env: Mapping[str, str] = field(default_factory=dict)
    figures: Figures | None = None
    metrics: Metrics | None = None
    failure: str | None = None  # a failure class: bad_flag, out_of_memory, crash, no_success, ...
    reason: str | None = None  # one line: why
    evidence: str | None = None  # the log's root-cause line(s)
    log_path: str | None = None
    requests_path: str | None = None  # per-request timings (.npz) next to the trial's log
    kv_tokens: int | None = None
    kv_max_concurrency: float | None = None
    timings_s: Mapping[str, float] = field(default_factory=dict)  # startup, warmup, measure, teardown
    memory: Mapping[str, Any] = field(default_factory=dict)  # measured peaks, or the estimate
    violations: tuple[str, ...] = ()  # memory constraints the run broke (host swapped, ...)
    engine: str | None = None  # e.g. "vllm 0.32.0 (cpu build)"
    baseline: bool = False
    reference: str | None = None  # when the baseline is not vLLM's plain defaults: what it is
    duplicate_of: int | None = None
    constraints: tuple[float, ...] = ()
    constraint_names: tuple[str, ...] = ()
    passes: tuple[Mapping[str, Any], ...] = ()  # each replay on the started engine: its key figures
    notes: tuple[str, ...] = ()  # caveats about the measurement (behind schedule, cache reset leaked)
    predicted: Mapping[str, Any] = field(default_factory=dict)  # the prior's prediction (hit rates)
    forecast: Mapping[str, Any] = field(default_factory=dict)  # the latency model's, before launch

    @property
    def ok(self) -> bool:
        return self.status is TrialStatus.OK

    @property
    def saturated(self) -> bool:
        """Measured, but the server could not keep up with the arrivals (see ``Figures.saturated``)."""
        return self.ok and self.figures is not None and self.figures.saturated

    @property
    def startup_s(self) -> float | None:
        return self.timings_s.get("startup")

    def pass_values(self, name: str) -> list[float]:
        """``name`` in each pass on the started engine (when the trial recorded its passes)."""
        return [float(p[name]) for p in self.passes if isinstance(p.get(name), int | float)]

    def pass_spread(self, name: str) -> float | None:
        """(max - min) / median of ``name`` over the passes; None with fewer than two."""
        values = sorted(self.pass_values(name))
        if len(values) < 2:
            return None
        mid = (
            values[len(values) // 2]
            if len(values) % 2
            else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
        )
        return (values[-1] - values[0]) / mid if mid else None

    def metric(self, name: str) -> float | None:
        """A figure or an engine metric by name; None when not measured."""
        if self.figures is not None:
            value = self.figures.get(name)
            if value is not None:
                return value
        if self.metrics is not None:
            return self.metrics.raw.get(name)
        return None

    def with_(self, **changes: Any) -> TrialRecord:
        from dataclasses import replace

        return replace(self, **changes)

    def to_attrs(self) -> dict[str, Any]:
        """JSON-serialisable ``user_attrs`` (the keys of version 1 kept, so older readers still work)."""
        return {
            "record_version": RECORD_VERSION,
            "status": self.status.value,
            "command": list(self.command),
            "rendered_args": list(self.rendered_args),
            "rendered_env": dict(self.rendered_env),
            "figures": self.figures.as_dict() if self.figures else None,
            "metrics": self.metrics.as_dict() if self.metrics else None,
            "failure": self.failure,
            "reason": self.reason,
            "log_tail": self.evidence,
            "log_path": self.log_path,
            "requests_path": self.requests_path,
            "kv_tokens": self.kv_tokens,
            "kv_max_concurrency": self.kv_max_concurrency,
            "timings_s": dict(self.timings_s),
            "memory": dict(self.memory),
            "violations": list(self.violations),
            "engine": self.engine,
            BASELINE_ATTR: self.baseline,
            "reference": self.reference,
            "duplicate_of": self.duplicate_of,
            "constraints": list(self.constraints),
            "constraint_names": list(self.constraint_names),
            "passes": [dict(p) for p in self.passes],
            "notes": list(self.notes),
            "predicted": dict(self.predicted),
            **self._dashboard_attrs(),
        }

    def _dashboard_attrs(self) -> dict[str, Any]:
        """Flat, readable copies for optuna-dashboard's trial table (the nested records above are
        the source of truth; these are never read back)."""
        out: dict[str, Any] = {"config": " ".join(self.rendered_args) or "(baseline flags only)"}
        for name in ("ttft_p50", "ttft_p90", "tpot_p50"):
            value = self.figures.get(name) if self.figures else None
            if value is not None:
                out[f"{name}_ms"] = round(value, 2)
        if self.figures is not None and self.ok:
            out["output_tok_s"] = round(self.figures.output_throughput, 1)
        for name in ("prefix_hit_rate", "host_hit_rate"):
            value = self.metrics.raw.get(name) if self.metrics else None
            if value is not None:
                out[name] = round(float(value), 3)
        if self.saturated:
            out["saturated"] = True
        if self.constraints:
            out["feasible"] = all(c <= 0 for c in self.constraints)
        if self.failure:
            out["why"] = f"{self.failure}: {(self.reason or '').splitlines()[0][:200] if self.reason else ''}"
        return out

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> TrialRecord:
        status = str(attrs.get("status"))
        try:
            st = TrialStatus(status)
        except ValueError:
            st = TrialStatus.FAILED
        figures = attrs.get("figures")
        metrics = attrs.get("metrics")
        return cls(
            status=st,
            command=tuple(attrs.get("command") or ()),
            rendered_args=tuple(attrs.get("rendered_args") or ()),
            rendered_env=dict(attrs.get("rendered_env") or {}),
            figures=Figures(dict(figures)) if figures else None,
            metrics=Metrics(dict(metrics)) if metrics else None,
            failure=attrs.get("failure"),
            reason=attrs.get("reason"),
            evidence=attrs.get("log_tail"),
            log_path=attrs.get("log_path"),
            requests_path=attrs.get("requests_path"),
            kv_tokens=attrs.get("kv_tokens"),
            kv_max_concurrency=attrs.get("kv_max_concurrency"),
            timings_s=dict(attrs.get("timings_s") or {}),
            memory=dict(attrs.get("memory") or {}),
            violations=tuple(attrs.get("violations") or ()),
            engine=attrs.get("engine"),
            baseline=bool(attrs.get(BASELINE_ATTR)),
            reference=attrs.get("reference"),
            duplicate_of=attrs.get("duplicate_of"),
            constraints=tuple(float(c) for c in attrs.get("constraints") or ()),
            constraint_names=tuple(attrs.get("constraint_names") or ()),
            passes=tuple(dict(p) for p in attrs.get("passes") or ()),
            notes=tuple(attrs.get("notes") or ()),
            predicted=dict(attrs.get("predicted") or {}),
            forecast=dict(attrs.get(FORECAST_ATTR) or {}),
        )


def read_record(trial: optuna.trial.FrozenTrial) -> TrialRecord:
    """The record of a finished (or running) trial; a trial that never wrote one reads as failed."""
    attrs = trial.user_attrs
    if "status" not in attrs:
        return TrialRecord(
            status=TrialStatus.FAILED,
            failure=trial.state.name.lower(),
            reason=f"the trial ended {trial.state.name} before it recorded a measurement",
            baseline=bool(attrs.get(BASELINE_ATTR)),
        )
    return TrialRecord.from_attrs(attrs)


def write_record(trial: optuna.Trial, record: TrialRecord) -> None:
    for key, value in record.to_attrs().items():
        trial.set_user_attr(key, value)


class TrialListener(Protocol):
    """What an evaluator tells the study while a trial runs."""

    def engine_up(self) -> None:
        """The engine is up and the replay has not started; it may block (a worker's GPU gate, a
        group's barrier), and what it raises ends the trial."""
        ...

    def checkpoint(self, step: int, figures: Mapping[str, Any]) -> str | None:
        """The figures so far at ``step`` (steps are comparable across trials: a quarter of one
        pass's requests each); why to stop the trial early (the pruner's reason), or None to go on."""
        ...

    def level(self, multiplier: float, held: bool, broke: str) -> tuple[bool, str]:
        """A capacity level measured at ``multiplier`` of the workload's pace (``held``, or why it
        ``broke``): the verdict the bracket goes on with. One engine's is its own; in a group every
        engine's levels run in step and a level holds only where every model holds it (it may block)."""
        ...


class Evaluator(Protocol):
    """Measures one configuration (the study's only view of the outside world)."""

    def __call__(
        self, number: int, config: EngineConfig, listener: TrialListener | None = None
    ) -> TrialRecord: ...

    def render(self, config: EngineConfig) -> RenderedConfig:
        """``config`` in its engine's words, as the trial's record keeps them (the engine renders it)."""
        ...


@runtime_checkable
class Prestarter(Protocol):
    """An evaluator that can start a trial's engine ahead of its turn (overlapped starts)."""

    def prestart(self, number: int, config: EngineConfig) -> str | None:
        """Start ``number``'s engine now; the reason when it does not (it then starts at its turn)."""
        ...

    def discard_prestart(self, number: int | None = None) -> None:
        """Stop the engine started ahead (only trial ``number``'s, when given)."""
        ...


def constraints_hold(values: Sequence[float]) -> bool:
    return all(c <= 0 for c in values)


CONSTRAINTS_KEY = "constraints"  # Optuna's constraints_func convention: a list in the system attrs


def store_constraints(trial: optuna.Trial, names: Sequence[str], values: Sequence[float]) -> None:
    """The trial's constraints (<= 0 is met) where each reader looks for them: by name, as Optuna 5's
    ``Trial.set_constraint`` keeps them (its samplers read these), and as the list the
    ``constraints_func`` convention keeps (optuna-dashboard marks infeasible trials from that)."""
    for name, value in zip(names, values, strict=False):
        trial.set_constraint(name, value)
    trial.study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_KEY, [float(v) for v in values])
