"""What a report shows, read from a study: one row per trial and the study's facts.

Reads :class:`~autotune.study.TrialRecord` only (never ``user_attrs`` keys of trials); the study
attributes it reads are those the CLI writes (``objective``, ``engine_profile``,
``param_formats``, ``confirmation_<n>``). Everything here is plain data for the page builders.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from autotune.engine import flags_less
from autotune.errors import ExportError
from autotune.export import measured_engine_argv
from autotune.space import RoleNames
from autotune.study import TrialRecord, baseline_trial, best_feasible, constraints_hold, read_record
from autotune.trial import read_request_timings

__all__ = ["FIGURE_COLUMNS", "StudyFacts", "TrialRow", "collect", "pareto_front", "request_cdf"]

# engine/_logscan.py failure_excerpt: a failed trial's evidence starts with its root-cause line
_ROOT_CAUSE = "root cause: "
# The latency columns of the trial table (ms), then the rates.
FIGURE_COLUMNS = tuple(f"{m}_{p}" for m in ("ttft", "tpot", "itl") for p in ("p50", "p90", "p99"))


@dataclass(frozen=True)
class TrialRow:
    """One trial as the report shows it."""

    number: int
    status: str  # ok / failed / infeasible, or Optuna's state for a trial that recorded nothing
    record: TrialRecord
    params: Mapping[str, Any]
    value: float | None  # the objective, measured trials only
    feasible: bool  # measured and every constraint holds
    violated: tuple[str, ...] = ()  # names of the constraints it broke

    @property
    def baseline(self) -> bool:
        return self.record.baseline

    def figure(self, name: str) -> float | None:
        f = self.record.figures
        return f.get(name) if f is not None and self.record.ok else None

    @property
    def output_throughput(self) -> float | None:
        return self.figure("output_throughput")

    @property
    def goodput(self) -> float | None:
        return self.figure("goodput")

    @property
    def prefix_hit_rate(self) -> float | None:
        m = self.record.metrics
        return m.prefix_hit_rate if m is not None else None

    @property
    def host_hit_rate(self) -> float | None:
        m = self.record.metrics
        return m.host_hit_rate if m is not None else None

    @property
    def gpu_peak_bytes(self) -> int | None:
        """The highest per-device GPU peak (bytes); None without a GPU sample."""
        peaks = [int(p) for p in self.record.memory.get("gpu_used_peak") or () if p]
        return max(peaks) if peaks else None

    @property
    def rss_peak_bytes(self) -> int | None:
        rss = self.record.memory.get("rss_peak")
        return int(rss) if rss else None

    @property
    def evidence_line(self) -> str:
        """Why it failed, in one line: the log's root cause (the engine writes it first in the
        evidence as ``root cause: ...``), else the reason, else the log's last line."""
        lines = [ln.strip() for ln in (self.record.evidence or "").splitlines() if ln.strip()]
        cause = next((ln.removeprefix(_ROOT_CAUSE) for ln in lines if ln.startswith(_ROOT_CAUSE)), None)
        if cause:
            return cause
        reason = next((ln.strip() for ln in (self.record.reason or "").splitlines() if ln.strip()), "")
        return reason or (lines[-1] if lines else "")

    def label(self) -> str:
        if self.baseline:
            return f"#{self.number} baseline"
        return f"#{self.number}"


@dataclass(frozen=True)
class StudyFacts:
    """The study as a whole: what ran, on what, and which trials matter."""

    name: str
    objective: str
    direction: str  # minimize / maximize
    rows: tuple[TrialRow, ...]
    param_names: tuple[str, ...]
    param_formats: Mapping[str, str] = field(default_factory=dict)
    roles: RoleNames = field(
        default_factory=RoleNames
    )  # which parameter is the host pool, ... (as the study stored them)
    engine: str | None = None
    engine_profile: str | None = None
    model: str | None = None
    fixed_flags: tuple[str, ...] = ()
    baseline: TrialRow | None = None
    best: TrialRow | None = None
    confirmation: Mapping[str, Any] | None = None  # the record of the best's re-measurement

    @property
    def measured(self) -> tuple[TrialRow, ...]:
        return tuple(r for r in self.rows if r.record.ok and r.record.figures is not None)

    @property
    def has_offload(self) -> bool:
        """Whether a CPU offload pool can exist (not on the CPU build, where KV is already in host memory)."""
        return self.engine_profile != "cpu"

    @property
    def minimize(self) -> bool:
        return self.direction == "minimize"

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def _row(trial: optuna.trial.FrozenTrial) -> TrialRow:
    rec = read_record(trial)
    recorded = "status" in trial.user_attrs
    status = rec.status.value if recorded else trial.state.name.lower()
    constraints = rec.constraints or (1.0,)  # as best_feasible reads it: none recorded, not feasible
    violated = tuple(name for name, c in zip(rec.constraint_names, rec.constraints, strict=False) if c > 0)
    value = trial.value if rec.ok and trial.value is not None and math.isfinite(trial.value) else None
    return TrialRow(
        number=trial.number,
        status=status,
        record=rec,
        params=dict(trial.params),
        value=value,
        feasible=rec.ok and constraints_hold(constraints),
        violated=violated,
    )


def _model_and_fixed(row: TrialRow | None) -> tuple[str | None, tuple[str, ...]]:
    """The model and the fixed flags (the command's flags less the tuned ones) of a trial."""
    if row is None or not row.record.command:
        return None, ()
    try:
        model, flags = measured_engine_argv(row.record.command)
        kept = flags_less(flags, row.record.rendered_args)
    except (ExportError, ValueError):  # a command we cannot read: the report shows it as stored
        return None, ()
    return model, tuple(kept)


def collect(study: optuna.Study) -> StudyFacts:
    """The report's view of ``study`` (finished trials; waiting and running ones are left out)."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    rows = tuple(_row(t) for t in trials)
    by_number = {r.number: r for r in rows}
    names: list[str] = []
    for t in trials:
        names.extend(p for p in t.params if p not in names)
    base_t, best_t = baseline_trial(study), best_feasible(study)
    base = by_number.get(base_t.number) if base_t is not None else None
    best = by_number.get(best_t.number) if best_t is not None else None
    engine = next((r.record.engine for r in rows if r.record.engine), None)
    model, fixed = _model_and_fixed(base or next((r for r in rows if r.record.command), None))
    confirmation = study.user_attrs.get(f"confirmation_{best.number}") if best is not None else None
    return StudyFacts(
        name=study.study_name,
        objective=str(study.user_attrs.get("objective", "ttft_p90")),
        direction=study.direction.name.lower(),
        rows=rows,
        param_names=tuple(names),
        param_formats=dict(study.user_attrs.get("param_formats") or {}),
        roles=_roles(study, names),
        engine=engine,
        engine_profile=study.user_attrs.get("engine_profile"),
        model=model,
        fixed_flags=fixed,
        baseline=base,
        best=best,
        confirmation=confirmation if isinstance(confirmation, Mapping) else None,
    )


def _roles(study: optuna.Study, names: list[str]) -> RoleNames:
    """The study's stored roles; a study stored before roles: by its parameters' pre-role names."""
    stored = study.user_attrs.get("param_roles")
    return RoleNames.of(stored) if isinstance(stored, Mapping) else RoleNames.guessed(names)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (x lower is better, y higher is
    better), ordered by x."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (ox <= x and oy >= y) and (ox < x or oy > y) for j, (ox, oy) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def request_cdf(
    row: TrialRow, name: str, search_dir: Path | None = None
) -> tuple[np.ndarray, np.ndarray] | str:
    """Sorted per-request values of ``name`` (``ttft`` or ``tpot``, in ms) and their cumulative share,
    or a sentence saying why there are none. A study moved to another folder is still read: the
    file is looked up by name in ``search_dir`` when its recorded path is gone."""
    path = row.record.requests_path
    if not path:
        return f"trial {row.number} recorded no per-request timings (written by an older version)"
    candidates = [Path(path)]
    if search_dir is not None:
        candidates.append(search_dir / Path(path).name)
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        return f"trial {row.number}'s per-request timings are gone ({path})"
    arrays = read_request_timings(found)
    values = arrays.get(name)
    if values is None:
        return f"trial {row.number}'s timings file has no {name} ({found})"
    ms = np.sort(values[np.isfinite(values)]) * 1000.0
    if ms.size == 0:
        return f"trial {row.number} has no {name} measured (no request succeeded)"
    return ms, np.arange(1, ms.size + 1) / ms.size
