"""One trial, end to end: start vLLM with a configuration, warm up, replay, measure, stop.

This is the seam between the study (which only sees :class:`TrialOutcome`) and the outside
world (engine subprocess, HTTP). Expected outcomes (failed start, crash mid-run) are data.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from autotune.bench import (
    ArrivalSpec,
    MetricsDelta,
    ReplayTarget,
    TrialFigures,
    replay,
    scrape_metrics,
    summarize,
    warm_up,
)
from autotune.bench._replay import History
from autotune.engine import EngineProcess, LaunchSpec, VllmArgChecker, clean_stale_shm
from autotune.errors import EngineCrashed, EngineStartError
from autotune.memory import MemorySampler
from autotune.memory_guard import MemoryGuard
from autotune.outcome import TrialOutcome, TrialStatus
from autotune.space import RenderedConfig
from autotune.workload import Workload

__all__ = ["VllmEvaluator"]

log = logging.getLogger(__name__)


@dataclass
class VllmEvaluator:
    """Runs trials against a real vLLM process (or anything launched the same way)."""

    spec: LaunchSpec
    workload: Workload
    arrival: ArrivalSpec
    log_dir: Path
    warmup_requests: int = 2
    history: History = "recorded"
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    request_timeout_s: float = 600.0
    arg_checker: VllmArgChecker | None = None  # vLLM's own parser, to reject bad flags before launch
    memory: MemoryGuard | None = None  # feasibility before launch, memory peaks during the run
    host_sources: tuple[str, ...] = ("host",)  # /metrics labels of the profile's CPU-pool hits
    shm_patterns: tuple[str, ...] = ()  # /dev/shm files the profile's pool may leave after a crash

    def __call__(self, number: int, rendered: RenderedConfig) -> TrialOutcome:
        engine = EngineProcess(self.spec, rendered, self.log_dir / f"trial-{number:04d}.log")
        command = tuple(engine.argv)
        engine_argv = engine.argv[len(self.spec.launcher) :]
        rejected = self._reject_before_launch(number, command, engine_argv)
        if rejected is not None:
            return rejected
        gpu_before = self.memory.gpu_used() if self.memory is not None else None
        t_start = time.monotonic()
        sampler: MemorySampler | None = None
        peak: dict[str, Any] = {}
        try:
            engine.start()
            if self.memory is not None and engine.pid is not None:
                sampler = self.memory.sampler(engine.pid)
                sampler.start()
            engine.wait_healthy()
            kv = engine.kv_capacity()
            figures, metrics, phase = asyncio.run(self._measure(engine))
            engine.check_alive()  # requests that failed because vLLM died make a crashed trial
        except (EngineStartError, EngineCrashed) as exc:
            log.info("trial %d: engine failed: %s", number, exc.failure)
            return TrialOutcome(
                status=TrialStatus.FAILED,
                command=command,
                failure=exc.failure,
                reason=str(exc),
                log_path=exc.log_path,
                log_tail=exc.log_tail,
                timings_s={"startup": engine.startup_s or (time.monotonic() - t_start)},
                memory=peak,
            )
        finally:
            t_stop = time.monotonic()
            if sampler is not None:
                peak.update(MemoryGuard.peak_record(sampler.stop()))
            engine.stop()  # also on Ctrl-C and on any error: no vLLM outlives its trial
            if self.memory is not None:
                self.memory.wait_gpu_released(gpu_before)
            if self.shm_patterns:  # a crashed engine's pool files; files a live process holds stay
                clean_stale_shm(self.shm_patterns)
            teardown = time.monotonic() - t_stop
        violations: tuple[str, ...] = ()
        if self.memory is not None and sampler is not None:
            violations = self.memory.violations(sampler.result())
            for v in violations:
                log.warning("trial %d: %s", number, v)
        return TrialOutcome(
            status=TrialStatus.OK,
            command=command,
            figures=figures,
            metrics=metrics,
            log_path=str(engine.log_path),
            kv_tokens=kv.tokens if kv else None,
            kv_max_concurrency=kv.max_concurrency if kv else None,
            timings_s={"startup": engine.startup_s or 0.0, **phase, "teardown": teardown},
            memory=peak,
            violations=violations,
        )

    def _reject_before_launch(
        self, number: int, command: tuple[str, ...], engine_argv: list[str]
    ) -> TrialOutcome | None:
        """A command vLLM's parser rejects, or a configuration that cannot fit, never starts."""
        if self.arg_checker is not None:
            check = self.arg_checker.check(engine_argv)
            if not check.ok:
                log.info("trial %d: vLLM's parser rejects the command: %s", number, check.error)
                return TrialOutcome(
                    status=TrialStatus.INFEASIBLE,
                    command=command,
                    failure="bad_flag",
                    reason=f"rejected by vLLM {self.arg_checker.version}'s argument parser before launch: "
                    f"{check.error}",
                )
        if self.memory is not None:
            verdict = self.memory.check(engine_argv)
            if not verdict.feasible:
                log.info("trial %d: does not fit: %s", number, "; ".join(verdict.reasons))
                return TrialOutcome(
                    status=TrialStatus.INFEASIBLE,
                    command=command,
                    failure="does_not_fit",
                    reason="does not fit before launch: " + "; ".join(verdict.reasons),
                    memory={"estimate": asdict(verdict.estimate)} if verdict.estimate else {},
                )
        return None

    async def _measure(
        self, engine: EngineProcess
    ) -> tuple[TrialFigures, MetricsDelta | None, dict[str, float]]:
        timeout = httpx.Timeout(self.request_timeout_s, connect=10.0)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        async with httpx.AsyncClient(trust_env=False, timeout=timeout, limits=limits) as client:
            model = await _served_model(client, engine.base_url, self.spec)
            target = ReplayTarget(base_url=engine.base_url, model=model, api_key=self.spec.api_key)
            t0 = time.monotonic()
            chat = any(r.is_chat for r in self.workload.requests)
            await warm_up(client, target, count=self.warmup_requests, chat=chat)
            t1 = time.monotonic()
            before = await scrape_metrics(client, engine.base_url)
            result = await replay(client, target, self.workload, self.arrival, history=self.history)
            after = await scrape_metrics(client, engine.base_url)
            t2 = time.monotonic()
        metrics = MetricsDelta.between(before, after, self.host_sources) if before and after else None
        figures = summarize(result.timings, result.duration_s, slos_ms=self.slos_ms or None)
        return figures, metrics, {"warmup": t1 - t0, "measure": t2 - t1}


async def _served_model(client: httpx.AsyncClient, base_url: str, spec: LaunchSpec) -> str:
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    try:
        resp = await client.get(base_url + "/v1/models", headers=headers, timeout=10.0)
        data = resp.json().get("data") or []
        if data:
            return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError):
        pass
    return spec.fixed_value("--served-model-name") or spec.model
