"""A day's traffic as the workload: a folder of traffic files, windowed and sampled down.

A folder holds workload JSONL files, e.g. the hourly files of ``autotune capture``
(``traffic-20261202T05.jsonl``: requests of 05:00-06:00 UTC, timestamps in seconds from the start
of that hour). A file's start time is read from a ``YYYYMMDDTHH`` stamp in its name (UTC), else
its modification time. :func:`load_traffic` merges the files on one clock (file start +
timestamp), keeps the files of the latest ``window_s`` seconds, and samples down to
``max_requests`` or ``max_duration_s``:

- whole sessions are kept or dropped (a request without a session is its own session);
- sessions are chosen evenly over the day (systematic sampling in start order from a seeded
  offset), so the arrival-rate curve keeps its shape;
- session starts are moved closer by the kept fraction, so the rate at each moment of the shorter
  replay is the rate of the matching moment of the day (the curve keeps its level too); the gaps
  between the turns of a session are kept.

:func:`traffic_stats` and :func:`describe_change` name what changed from one night to the next.
"""

from __future__ import annotations

import calendar
import math
import random
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from autotune.errors import WorkloadError
from autotune.workload._inspect import inspect_workload
from autotune.workload._loader import load_workload
from autotune.workload._model import Workload, WorkloadRequest
from autotune.workload._tokens import PromptTokenizer

__all__ = ["TrafficStats", "describe_change", "load_traffic", "traffic_file_start", "traffic_stats"]

_STAMP = re.compile(r"(\d{8})T(\d{2})")
_SUFFIXES = (".jsonl",)


def traffic_file_start(path: Path) -> float:
    """Epoch seconds at which a traffic file starts: the ``YYYYMMDDTHH`` in its name, else its mtime."""
    match = _STAMP.search(path.name)
    if match:
        try:
            parsed = time.strptime(match.group(1) + match.group(2), "%Y%m%d%H")
        except ValueError:
            pass
        else:
            return float(calendar.timegm(parsed))
    return path.stat().st_mtime


def _files(folder: Path, window_s: float | None) -> list[tuple[float, Path]]:
    files = sorted(
        (traffic_file_start(p), p) for p in folder.iterdir() if p.is_file() and p.suffix in _SUFFIXES
    )
    if not files:
        raise WorkloadError(f"{folder}: no traffic files (*.jsonl) in the folder (point --workload at them)")
    if window_s is not None:
        if window_s <= 0:
            raise WorkloadError(f"window: {window_s:g} s is not positive (e.g. 24h)")
        newest = files[-1][0]
        files = [(start, p) for start, p in files if start > newest - window_s]
    return files


def _merge(folder: Path, files: list[tuple[float, Path]], skip_bad_lines: bool) -> Workload:
    """All requests on one clock, by arrival time; timestamps rebased to the earliest."""
    loaded = [(start, load_workload(p, skip_bad_lines=skip_bad_lines)) for start, p in files]
    timed = all(w.has_timestamps for _, w in loaded)
    rows: list[tuple[float, WorkloadRequest]] = []
    for start, w in loaded:
        for r in w.requests:
            rows.append((start + r.timestamp if timed and r.timestamp is not None else 0.0, r))
    if timed:
        rows.sort(key=lambda row: row[0])  # stable: turns of one session keep their order
    t0 = rows[0][0] if rows else 0.0
    requests = tuple(
        replace(r, index=i, timestamp=(t - t0) if timed else r.timestamp) for i, (t, r) in enumerate(rows)
    )
    skipped = tuple(message for _, w in loaded for message in w.skipped)
    return Workload(path=folder, requests=requests, skipped=skipped)


def _sessions_by_start(w: Workload) -> list[tuple[WorkloadRequest, ...]]:
    sessions = list(w.sessions().values())
    if w.has_timestamps:
        sessions.sort(key=lambda s: (s[0].timestamp or 0.0, s[0].index))
    return sessions


def _sample(w: Workload, max_requests: int | None, max_duration_s: float | None, seed: int) -> Workload:
    total = len(w)
    duration = max((r.timestamp or 0.0) for r in w.requests) if w.has_timestamps else 0.0
    target = total if max_requests is None else max_requests
    if max_duration_s is not None and duration > max_duration_s:
        target = min(target, math.floor(total * max_duration_s / duration))
    if target >= total:
        return w
    fraction = target / total
    rng = random.Random(seed)
    sessions = _sessions_by_start(w)
    offset = rng.random()
    kept = [
        s
        for i, s in enumerate(sessions)
        if math.floor((i + 1) * fraction + offset) > math.floor(i * fraction + offset)
    ]
    while kept and sum(map(len, kept)) > target:  # long sessions can overshoot: drop random ones
        kept.pop(rng.randrange(len(kept)))
    if not kept:
        raise WorkloadError(
            f"{w.path}: no whole session fits in {target} requests (raise --max-requests or --max-duration)"
        )
    scale = sum(map(len, kept)) / total  # the share kept: starts move closer by it
    requests: list[WorkloadRequest] = []
    for session in kept:
        first = session[0].timestamp
        shift = 0.0 if first is None else first * scale - first
        requests += [
            replace(r, timestamp=None if r.timestamp is None else r.timestamp + shift) for r in session
        ]
    if w.has_timestamps:
        requests.sort(key=lambda r: (r.timestamp or 0.0, r.index))
    return Workload(
        path=w.path, requests=tuple(replace(r, index=i) for i, r in enumerate(requests)), skipped=w.skipped
    )


def load_traffic(
    path: Path | str,
    *,
    window_s: float | None = None,
    max_requests: int | None = None,
    max_duration_s: float | None = None,
    seed: int = 0,
    skip_bad_lines: bool = False,
) -> Workload:
    """A workload from a traffic folder (or one file), windowed and sampled down (module docstring).

    Raises :class:`WorkloadError` naming the file and line of a bad record, or the bad option.
    """
    source = Path(path)
    if max_requests is not None and max_requests < 1:
        raise WorkloadError(f"max_requests: {max_requests} is not >= 1 (fix: a positive number of requests)")
    if max_duration_s is not None and max_duration_s <= 0:
        raise WorkloadError(f"max_duration: {max_duration_s:g} s is not positive (e.g. 10m)")
    if source.is_dir():
        workload = _merge(source, _files(source, window_s), skip_bad_lines)
    else:  # a file (a missing one is refused by the loader, as everywhere)
        workload = load_workload(source, skip_bad_lines=skip_bad_lines)
    if not workload.requests:
        raise WorkloadError(f"{source}: no requests in the traffic files of the window")
    return _sample(workload, max_requests, max_duration_s, seed)


@dataclass(frozen=True)
class TrafficStats:
    """What a night's workload looks like, in the figures that move a tuning result."""

    requests: int
    sessions: int
    prompt_tokens: int
    prefix_reuse: float  # share of prompt tokens an unlimited prefix cache could serve
    working_set_tokens: int
    block_size: int
    duration_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrafficStats:
        """From :meth:`as_dict` output (e.g. stored with the previous night's study)."""
        missing = [name for name in cls.__dataclass_fields__ if name not in data]
        if missing:
            raise WorkloadError(
                f"traffic stats: {', '.join(missing)} missing (fix: store TrafficStats.as_dict())"
            )
        fields: dict[str, Any] = {name: data[name] for name in cls.__dataclass_fields__}
        return cls(**fields)


def traffic_stats(
    w: Workload, *, tokenizer: PromptTokenizer | None = None, block_size: int = 16
) -> TrafficStats:
    report = inspect_workload(w, block_size=block_size, tokenizer=tokenizer)
    return TrafficStats(
        requests=report.requests,
        sessions=len(w.sessions()),
        prompt_tokens=report.prompt_tokens.total,
        prefix_reuse=report.prefix_reuse,
        working_set_tokens=report.working_set_tokens,
        block_size=block_size,
        duration_s=report.duration_s,
    )


def _relative(name: str, old: float, new: float, threshold: float, unit: str = "") -> str | None:
    if old == new or (old and abs(new - old) / old < threshold):
        return None
    change = f"{(new - old) / old:+.0%}" if old else "new"
    return f"{name} {old:,.0f}{unit} -> {new:,.0f}{unit} ({change})"


def describe_change(
    old: TrafficStats | Mapping[str, Any] | None,
    new: TrafficStats,
    *,
    threshold: float = 0.1,
    reuse_points: float = 5.0,
) -> list[str]:
    """What changed from ``old`` (the previous night) to ``new``: one line per figure that moved.

    Counts move when they change by ``threshold`` (relative) or more; prefix reuse when it moves by
    ``reuse_points`` percentage points. An empty list: nothing notable. ``old`` None: the first night.
    """
    if old is None:
        return ["first night: no previous traffic to compare"]
    before = old if isinstance(old, TrafficStats) else TrafficStats.from_mapping(old)
    lines: list[str] = []
    if before.block_size != new.block_size:
        lines.append(
            f"block size {before.block_size} -> {new.block_size} (reuse and working set not comparable)"
        )
    for name, a, b, unit in (
        ("requests", before.requests, new.requests, ""),
        ("sessions", before.sessions, new.sessions, ""),
        ("prompt tokens", before.prompt_tokens, new.prompt_tokens, ""),
        ("working set", before.working_set_tokens, new.working_set_tokens, " tokens"),
    ):
        line = _relative(name, float(a), float(b), threshold, unit)
        if line:
            lines.append(line)
    points = (new.prefix_reuse - before.prefix_reuse) * 100
    if abs(points) >= reuse_points:
        lines.append(
            f"prefix reuse {before.prefix_reuse:.1%} -> {new.prefix_reuse:.1%} ({points:+.1f} points)"
        )
    return lines
