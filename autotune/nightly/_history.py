"""Night records, kept in the study's own storage (one study attribute per night), so every
worker, report and later night reads the same history, on SQLite or PostgreSQL. One record type for
a night of N >= 1 engines: a group's night (several models on one server) adds its ``group`` facts;
a group night kept before the two were one (``group_night:NNNN``) is read into the same type."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import optuna

from autotune.study import figure_text

__all__ = ["NIGHT_ATTR", "NightRecord", "figure_range", "last_night", "nights", "save_night"]

NIGHT_ATTR = "night"  # trial attr: the night that ran it
_PREFIX = "night:"
_GROUP_PREFIX = "group_night:"  # a group's night as kept before the night was one pipeline: read only


@dataclass(frozen=True)
class NightRecord:
    number: int
    date: str
    fingerprints: dict[str, dict[str, Any]]
    changes: list[str]
    metric: str
    baseline_figure: dict[str, Any] | None  # median, low, high, runs of tonight's baseline
    incumbent_label: str
    incumbent_args: list[str] | None  # the deployed configuration's tuned flags (after tonight)
    incumbent_env: dict[str, str]
    incumbent_params: dict[str, Any] | None
    incumbent_figure: dict[str, Any] | None
    noise_band: float | None  # None: nothing measured it (one run of one pass, no earlier night)
    regression: bool
    regression_reason: str
    decision: str  # promoted | kept | nothing_feasible
    reason: str
    promoted_trial: int | None
    trials: int
    top_params: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    budget_s: float = 0.0
    export: str | None = None
    report: str | None = None
    band_source: str = ""
    plan: dict[str, Any] = field(default_factory=dict)  # NightPlan.as_dict()
    runs: list[dict[str, Any]] = field(default_factory=list)  # re-measurement and promotion runs
    candidates: list[dict[str, Any]] = field(default_factory=list)  # Candidate.as_dict(), tonight's trials
    run_costs: list[float] = field(default_factory=list)  # seconds per engine run tonight
    workload_changes: list[str] = field(default_factory=list)  # in words: requests, tokens, reuse
    budget_needed_s: float | None = None  # set when the budget let no candidate run: what the plan needs
    # a group's night only (several models on one server, its figure the group objective against
    # tonight's baseline group = 1.0): incumbent_trial, incumbent_value, best, trial_numbers, previous
    # (the folder the promoted group's replaced files went to), promoted_value; None for one engine
    group: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.group is None:  # one engine's record, as it was kept before a group's existed
            del d["group"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NightRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_group_dict(cls, d: dict[str, Any]) -> NightRecord:
        """A group's night as it was kept before the night was one pipeline (``group_night:NNNN``)."""
        best = d.get("best")
        return cls(
            number=int(d["number"]), date=str(d.get("started_at", "")), fingerprints={},
            changes=list(d.get("changes") or ()), metric="group_objective", baseline_figure=None,
            incumbent_label=str(d.get("incumbent", "")), incumbent_args=None, incumbent_env={},
            incumbent_params=None, incumbent_figure=None, noise_band=None, regression=bool(d.get("regression")),
            regression_reason="", decision=str(d.get("decision", "")), reason=str(d.get("reason", "")),
            promoted_trial=best if d.get("decision") == "promoted" else None, trials=len(d.get("trials") or ()),
            duration_s=float(d.get("duration_s") or 0.0), export=d.get("export"),
            run_costs=[float(c) for c in d.get("run_costs") or ()],
            group={"incumbent_trial": d.get("incumbent_trial"), "incumbent_value": d.get("incumbent_value"),
                   "best": best, "trial_numbers": list(d.get("trials") or ())},
        )  # fmt: skip

    def summary(self) -> str:
        """One paragraph for stdout and the cron mail."""
        if self.group is not None:
            return self._group_summary(self.group)
        inc = self.incumbent_figure
        base = self.baseline_figure
        parts = [
            f"Night {self.number} ({self.date}), {self.metric}:",
            f"{self.incumbent_label} {figure_range(inc, self.metric)}, baseline "
            f"{figure_range(base, self.metric)}, {self.band_text()}.",
            ("REGRESSION: " if self.regression else "No regression: ") + self.regression_reason + ".",
            f"{self.trials_text()} in {self.duration_s / 60:.1f} of {self.budget_s / 60:.1f} min"
            " (wall time from the start).",
        ]
        if self.decision == "promoted":
            parts.append(f"Promoted trial #{self.promoted_trial} ({self.reason}); wrote {self.export}.")
        elif self.decision == "kept":
            parts.append(f"Kept the incumbent: {self.reason}.")
        else:
            parts.append(f"Nothing feasible: {self.reason}.")
        if self.workload_changes:
            parts.append("The workload changed: " + "; ".join(self.workload_changes) + ".")
        if self.changes:
            parts.append("Changed since the last night: " + "; ".join(self.changes) + ".")
        return " ".join(parts)

    def _group_summary(self, group: dict[str, Any]) -> str:
        value = group.get("incumbent_value")
        head = f"Group night {self.number}: incumbent {self.incumbent_label}"
        head += f" {value:.3f} against tonight's baseline group" if value else ""
        alarm = "REGRESSION: " if self.regression else "No regression. "
        return f"{head}; {alarm}{self.reason} ({self.trials} group trial(s), {self.duration_s / 60:.1f} min)"

    def budget_line(self) -> str:
        """The last line of a night that could not run one candidate (exit 8); '' otherwise."""
        if self.budget_needed_s is None:
            return ""
        return (
            f"budget: {self.budget_s / 60:.1f} min could not hold one candidate; at tonight's measured "
            f"costs the plan needs {self.budget_needed_s / 60:.1f} min "
            f"(fix: --budget {math.ceil(self.budget_needed_s / 60)}m or more)"
        )

    def band_text(self) -> str:
        if self.noise_band is None:
            return f"noise band unknown ({self.band_source or 'not measured'})"
        return f"noise band {self.noise_band * 100:.2g}%" + (
            f" ({self.band_source})" if self.band_source else ""
        )

    def trials_text(self) -> str:
        """The trials the study holds for this night, with the engine runs they cost."""
        reused = sum(1 for c in self.candidates if c.get("reused") is not None)
        extra = f", {reused} reusing an earlier measurement" if reused else ""
        return f"{self.trials} trial(s) tonight{extra}"


def figure_range(f: dict[str, Any] | None, metric: str) -> str:
    """``63.4 ms [61.2 ms-65.0 ms]``: the median and range of a figure, with units."""
    if not f:
        return "not measured"
    return f"{figure_text(f['median'], metric)} [{figure_text(f['low'], metric)}-{figure_text(f['high'], metric)}]"


def nights(study: optuna.Study) -> list[NightRecord]:
    """The study's nights, in order: one engine's, a group's, and a group's kept as before."""
    out = [NightRecord.from_dict(v) for k, v in study.user_attrs.items() if k.startswith(_PREFIX)]
    out += [
        NightRecord.from_group_dict(v) for k, v in study.user_attrs.items() if k.startswith(_GROUP_PREFIX)
    ]
    return sorted(out, key=lambda n: n.number)


def last_night(study: optuna.Study) -> NightRecord | None:
    found = nights(study)
    return found[-1] if found else None


def save_night(study: optuna.Study, record: NightRecord) -> None:
    study.set_user_attr(f"{_PREFIX}{record.number:04d}", record.as_dict())
