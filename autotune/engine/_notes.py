"""What the installed engine warns about for a profile, before a study starts: the knowledge of which
profile needs which check stays behind the engine seam (the CLI only prints the lines)."""

from __future__ import annotations

import logging

from autotune.engine._lmcache_ops import lmcache_ops
from autotune.engine._platform import cpu_build_isa_note
from autotune.engine._profiles import EngineProfile

__all__ = ["startup_warnings"]

log = logging.getLogger(__name__)


def startup_warnings(profile: EngineProfile) -> tuple[str, ...]:
    """One line each: LMCache's compiled ops missing (a slow fallback would be tuned and deployed without
    a word), the CPU build on a CPU it was not built for (the figures would read as the tool's fault)."""
    found: list[str] = []
    if profile.name == "cuda-lmcache" and profile.unavailable is None:
        ops = lmcache_ops()
        log.info("LMCache's compiled ops: %s", ops.line)
        if (warning := ops.warning()) is not None:
            found.append(warning)
    if profile.name == "cpu" and (note := cpu_build_isa_note()) is not None:
        found.append(note)
    return tuple(found)
