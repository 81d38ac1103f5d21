"""Recording traffic where none is logged: a pass-through proxy in front of vLLM and its recorder.

``capture_app`` forwards every request unchanged and hands chat and completions requests to a
:class:`TrafficRecorder`, whose writer process appends anonymized (or raw) workload-format records
to hourly files under a disk bound. Recording never fails or delays a request.
"""

from __future__ import annotations

from autotune.capture._proxy import capture_app
from autotune.capture._recorder import RecorderConfig, TrafficRecorder

__all__ = [
    "RecorderConfig",
    "TrafficRecorder",
    "capture_app",
]
