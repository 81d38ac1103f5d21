"""Before a vLLM start: a command the engine's own parser rejects, or a configuration that cannot
fit this machine, is recorded as infeasible and never launched."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict

from autotune.engine import ArgChecker, EngineSizing
from autotune.study import TrialRecord, TrialStatus
from autotune.trial._memory_guard import MemoryGuard

__all__ = ["reject_before_launch"]

log = logging.getLogger(__name__)


def reject_before_launch(
    number: int,
    base: TrialRecord,
    engine_argv: Sequence[str],
    sizing: EngineSizing,
    *,
    checker: ArgChecker | None,
    memory: MemoryGuard | None,
    engine_name: str,
) -> TrialRecord | None:
    """The infeasible record of trial ``number`` (``base`` filled in), or None when it may start:
    ``engine_argv`` (the engine's command) for its own parser, ``sizing`` (its reading of the
    configuration) for the memory check."""
    if checker is not None:
        check = checker.check(list(engine_argv))
        if not check.ok:
            log.info("trial %d: the engine's parser rejects the command: %s", number, check.error)
            return base.with_(
                status=TrialStatus.INFEASIBLE,
                failure="bad_flag",
                reason=f"rejected by {engine_name} {checker.version}'s argument parser "
                f"before launch: {check.error}",
            )
    if memory is not None:
        verdict = memory.check(sizing)
        if not verdict.feasible:
            log.info("trial %d: does not fit: %s", number, "; ".join(verdict.reasons))
            return base.with_(
                status=TrialStatus.INFEASIBLE,
                failure="does_not_fit",
                reason="does not fit before launch: " + "; ".join(verdict.reasons),
                memory={"estimate": asdict(verdict.estimate)} if verdict.estimate else {},
            )
    return None
