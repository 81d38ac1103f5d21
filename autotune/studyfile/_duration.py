"""Durations as people write them: ``2h``, ``90m``, ``1h30m``, ``600s`` or ``600``."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str, *, allow_zero: bool = False) -> float:
    """Seconds; :class:`ValueError` with the fix when ``text`` is no duration (or none at all,
    unless ``allow_zero``)."""
    m = _DURATION.match(str(text).strip())
    if not str(text).strip() or not m or not any(m.groups()):
        raise ValueError(f"cannot read {text!r} as a duration (fix: e.g. 2h, 45m, 1h30m or 900s)")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    seconds = h * 3600 + mi * 60 + s
    if seconds <= 0 and not allow_zero:
        raise ValueError(f"{text!r} is no time at all (fix: e.g. 2h)")
    return seconds
