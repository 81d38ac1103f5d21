"""Per-request timings of a trial, kept compactly next to the study (one ``.npz`` per trial) so that
reports and later analyses can read distributions, not just the percentiles in the record."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from autotune.bench import RequestTiming
from autotune.export import write_atomically

__all__ = ["read_request_timings", "write_request_timings"]


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def write_request_timings(timings: Sequence[RequestTiming], path: Path) -> Path:
    """Arrays in seconds (NaN where a request failed): scheduled, sent, ttft, latency, tpot;
    output_tokens, status (0: no answer), ok, slot_wait (the part of the lag spent waiting for an
    in-flight slot). Written atomically."""
    arrays = {
        "scheduled": np.array([t.scheduled for t in timings], dtype=np.float64),
        "sent": np.array([t.sent for t in timings], dtype=np.float64),
        "ttft": np.array([_nan(t.ttft) for t in timings], dtype=np.float64),
        "latency": np.array([_nan(t.latency) for t in timings], dtype=np.float64),
        "tpot": np.array([_nan(t.tpot) for t in timings], dtype=np.float64),
        "output_tokens": np.array([t.output_tokens for t in timings], dtype=np.int32),
        "status": np.array([t.status or 0 for t in timings], dtype=np.int16),
        "ok": np.array([t.ok for t in timings], dtype=bool),
        "slot_wait": np.array([t.slot_wait for t in timings], dtype=np.float64),
    }
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    write_atomically(path, buf.getvalue())
    return path


def read_request_timings(path: str | Path) -> Mapping[str, np.ndarray]:
    """The arrays :func:`write_request_timings` wrote (empty when the file is gone)."""
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError):
        return {}
