"""A night's replay of a traffic folder, bounded by default.

A capture sidecar keeps days of traffic (up to 20,000 MB), and a night replays its workload once
per engine run, several runs a night. Unbounded, one run would replay a day at 1x against a budget
of hours. So where ``--workload`` is a folder and the user set no bound, the night keeps:

- ``window``: the latest 24 h of files (yesterday's traffic);
- ``max_duration``: arrivals of at most :data:`RUN_SHARE` of the budget per engine run, at the
  replay's ``speed`` and over its passes (``auto`` counts 1.5: it adds passes only within half a
  one-pass trial), sampled down by whole sessions with the arrival curve kept
  (:func:`autotune.workload.load_traffic`).

A bound the user set (in the file or as a flag) is kept as given. A workload file is never bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.studyfile import StudySpec, parse_duration
from autotune.workload import traffic_file_start

__all__ = ["NIGHT_WINDOW", "RUN_SHARE", "ReplayBound", "bound_night_replay"]

NIGHT_WINDOW = "24h"  # yesterday's traffic
RUN_SHARE = 0.10  # one engine run's replay: at most this share of the night's budget
AUTO_PASSES = 1.5  # passes=auto: one pass plus at most half a one-pass trial


@dataclass(frozen=True)
class ReplayBound:
    """The night's study with its replay bounded, and the plan's line saying how (None: unchanged)."""

    spec: StudySpec
    line: str | None


def _files_within(folder: Path, window_s: float) -> tuple[int, int]:
    starts = sorted(traffic_file_start(p) for p in folder.iterdir() if p.is_file() and p.suffix == ".jsonl")
    if not starts:
        return 0, 0
    return sum(1 for s in starts if s > starts[-1] - window_s), len(starts)


def bound_night_replay(spec: StudySpec) -> ReplayBound:
    """``spec`` with a folder workload's ``window`` and ``max_duration`` defaulted (module docstring)."""
    folder = spec.workload
    if folder is None or not Path(folder).is_dir():
        return ReplayBound(spec, None)
    update: dict[str, str] = {}
    said: list[str] = []
    if spec.window is None:
        update["window"] = NIGHT_WINDOW
    kept, total = _files_within(Path(folder), parse_duration(spec.window or NIGHT_WINDOW))
    said.append(f"window {spec.window or NIGHT_WINDOW} ({kept} of {total} files)")
    if spec.max_duration is None:
        passes = float(spec.passes) if spec.passes.isdigit() else AUTO_PASSES
        cap_s = max(1, int(RUN_SHARE * spec.budget_s * spec.speed / passes))
        update["max_duration"] = f"{cap_s}s"
        said.append(
            f"arrivals sampled to at most {cap_s} s (one engine run's replay at most "
            f"{RUN_SHARE:.0%} of the {spec.budget} budget, at speed {spec.speed:g}, passes {spec.passes})"
        )
    else:
        said.append(f"max_duration {spec.max_duration} (yours)")
    if not update:
        return ReplayBound(spec, None)
    line = f"tonight's replay of {folder}: " + "; ".join(said) + " (set window / max_duration to change)"
    return ReplayBound(spec.model_copy(update=update), line)
