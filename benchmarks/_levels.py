"""What the two capacity benchmarks share (issue 45): the study choices of a capacity run on the
bench model, one engine started as a study trial starts it, and the load levels measured on it
exactly as a capacity trial measures them (the tool's warm-up, then
:func:`autotune.trial._capacity.measure_level` per level: the prefix cache emptied, the workload
replayed at that load, judged against the SLOs).

The engine is an :class:`~autotune.engine.EngineProcess` used as a context manager: it is stopped
when the block is left, on an exception too; a SIGTERM or SIGHUP stops it and unwinds as Ctrl-C
(:func:`autotune.engine.install_signal_handlers`), and its guardian stops it if this process dies.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import _common as c
import httpx

from autotune.bench import DEFAULT_MAX_IN_FLIGHT, ArrivalSpec, ReplayTarget, replay_client, warm_up
from autotune.engine import EngineProcess
from autotune.space import EngineConfig
from autotune.studyfile import StudySpec
from autotune.trial._capacity import LevelContext
from autotune.trial._served import served_model
from autotune.tuning import TuningSetup

REQUEST_TIMEOUT_S = 600.0  # as a trial's (VllmEvaluator.request_timeout_s)
# the fake server as the capacity tests run it: one request at a time, so that its capacity is one
# over its service time (tests/e2e/test_cli_capacity.py)
FAKE_ENV = {"FAKE_SERIAL": "1", "FAKE_START_DELAY": "0.5"}


def capacity_choices(
    model: str,
    workload: Path,
    *,
    quick: bool,
    slos: Sequence[str],
    tolerance: float = 0.10,
    levels: int = 6,
    speed: float = 1.0,
    launcher: str | None = None,
    space: Path = c.CPU_SPACE,
    min_level: str = "10s",
    engine: Mapping[str, Any] | None = None,
) -> StudySpec:
    """``autotune run --objective capacity --slo SLO...`` on the bench set-up (:func:`_common.tuning_choices`:
    the CPU build's fixed flags and the baseline's 20 MiB pool, or the fake server with ``quick``;
    ``engine``: another engine's fixed flags, baseline flags, profile and start-up time, as
    :func:`_common.tuning_choices` takes them)."""
    base = c.tuning_choices(
        model, workload, quick=quick, speed=speed, space=space, slos=tuple(slos), **dict(engine or {})
    )
    return base.model_copy(
        update={
            "objective": "capacity",
            "capacity_tolerance": tolerance,
            "capacity_levels": levels,
            "capacity_min_level": min_level,
            "launcher": launcher or base.launcher,
        }
    )


def use_fake_env(extra: dict[str, str] | None = None) -> None:
    """The fake server's knobs, unless the caller's environment sets them (the engine inherits it)."""
    for k, v in {**FAKE_ENV, **(extra or {})}.items():
        os.environ.setdefault(k, v)


@contextlib.contextmanager
def started_engine(
    setup: TuningSetup, rendered: EngineConfig, log_path: Path, *, cache_dir: Path
) -> Iterator[EngineProcess]:
    """The engine of ``rendered`` (on top of the fixed and baseline flags) started and healthy, as a
    trial's engine (VLLM_SERVER_DEV_MODE=1 for the cache reset: a capacity setup's launch carries
    it); stopped on leaving the block. Raises EngineStartError when it does not come up."""
    spec = setup.launch if setup.launch.cache_dir else replace(setup.launch, cache_dir=cache_dir)
    with setup.engine.process(spec, rendered, log_path, shm_patterns=setup.profile.shm_patterns) as proc:
        proc.wait_healthy()
        yield proc


@contextlib.asynccontextmanager
async def level_context(
    setup: TuningSetup, base_url: str, arrival: ArrivalSpec
) -> AsyncIterator[LevelContext]:
    """A client on the engine at ``base_url``, the trial's warm-up sent, and the context that
    :func:`measure_level` replays ``setup.workload`` with at multiples of ``arrival``."""
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0)
    async with replay_client(max_in_flight=DEFAULT_MAX_IN_FLIGHT, timeout=timeout) as client:
        model = await served_model(client, base_url, setup.engine, setup.launch)
        target = ReplayTarget(base_url=base_url, model=model, api_key=setup.launch.api_key)
        requests = setup.workload.requests
        await warm_up(
            client, target, count=setup.choices.warmup, chat=any(r.is_chat for r in requests), like=requests
        )
        yield LevelContext(
            client=client,
            target=target,
            base_url=base_url,
            api_key=setup.launch.api_key,
            workload=setup.workload,
            arrival=arrival,
            history=setup.choices.history,
            request_slos=setup.objective.request_slos,
            metric_names=setup.engine.endpoints.metric_names,
            metrics_path=setup.engine.endpoints.metrics,
            host_sources=setup.profile.cpu_hit_sources or ("host",),
        )
