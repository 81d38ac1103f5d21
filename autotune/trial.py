"""One trial, end to end: start vLLM with a configuration, warm up, replay, measure, stop.

This is the seam between the study (which only sees :class:`TrialOutcome`) and the outside
world (engine subprocess, HTTP). Expected outcomes (failed start, crash mid-run) are data.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
from autotune.engine import EngineProcess, LaunchSpec, VllmArgChecker
from autotune.errors import EngineCrashed, EngineStartError
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

    def __call__(self, number: int, rendered: RenderedConfig) -> TrialOutcome:
        engine = EngineProcess(self.spec, rendered, self.log_dir / f"trial-{number:04d}.log")
        command = tuple(engine.argv)
        if self.arg_checker is not None:
            check = self.arg_checker.check(engine.argv[len(self.spec.launcher) :])
            if not check.ok:
                log.info("trial %d: vLLM's parser rejects the command: %s", number, check.error)
                return TrialOutcome(
                    status=TrialStatus.INFEASIBLE,
                    command=command,
                    failure="bad_flag",
                    reason=f"rejected by vLLM {self.arg_checker.version}'s argument parser before launch: "
                    f"{check.error}",
                )
        t_start = time.monotonic()
        teardown = 0.0
        try:
            engine.start()
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
            )
        finally:
            t_stop = time.monotonic()
            engine.stop()  # also on Ctrl-C and on any error: no vLLM outlives its trial
            teardown = time.monotonic() - t_stop
        return TrialOutcome(
            status=TrialStatus.OK,
            command=command,
            figures=figures,
            metrics=metrics,
            log_path=str(engine.log_path),
            kv_tokens=kv.tokens if kv else None,
            kv_max_concurrency=kv.max_concurrency if kv else None,
            timings_s={"startup": engine.startup_s or 0.0, **phase, "teardown": teardown},
        )

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
        metrics = MetricsDelta.between(before, after) if before and after else None
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
