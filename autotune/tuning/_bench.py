"""``autotune bench``: measure a server that is already running, exactly as a study trial measures its
engine (the trial's evaluator, its warm-up, passes, figures and /metrics delta), without starting or
stopping anything. The workload, arrivals and SLOs are read as ``run`` reads them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from autotune.bench import ArrivalSpec, ServerFacts, probe_server, replay_client, server_root
from autotune.engine import Engine, LaunchSpec, engine_named
from autotune.study import Objective, TrialRecord, parse_slo
from autotune.studyfile import StudySpec
from autotune.trial import PassPlan, VllmEvaluator, parse_passes
from autotune.tuning._setup import _api_key, _capacity_plan, _load, arrival_spec
from autotune.workload import Workload

__all__ = ["BENCH_KIND", "BenchResult", "bench_server"]

BENCH_KIND = "autotune-bench"  # the ``bench.kind`` of a JSON file ``bench --json-out`` wrote


@dataclass(frozen=True)
class BenchResult:
    """One measurement of a running server: the record a trial would have written, and its context."""

    server: ServerFacts
    record: TrialRecord
    workload: Workload
    arrival: ArrivalSpec
    passes: PassPlan
    slos_ms: dict[str, float]

    def as_json(self) -> dict[str, Any]:
        """The trial record's own keys (``TrialRecord.from_attrs`` reads it back) plus ``bench``: what
        was measured, where. No key: the server's URL carries no credentials (``server_root``)."""
        return {
            **self.record.to_attrs(),
            "bench": {
                "kind": BENCH_KIND,
                "url": self.server.url,
                "model": self.server.model,
                "server_version": self.server.version,
                "workload": str(self.workload.path),
                "requests": len(self.workload),
                "arrival": self.arrival.describe(),
                "passes": len(self.record.passes) or 1,
                "slos_ms": dict(self.slos_ms),
            },
        }


def bench_server(choices: StudySpec, url: str, *, engine: Engine | None = None) -> BenchResult:
    """Check the server at ``url`` (reachable, takes the key, serves the model), then measure it (with
    ``choices.objective == "capacity"``: bracket its capacity at the SLOs, never restarting it).
    Raises :class:`~autotune.errors.ServerRefused` (exit 2) before any request is replayed."""
    engine = engine if engine is not None else engine_named(choices.engine)
    workload = _load(choices)
    arrival = arrival_spec(choices, workload)
    passes = parse_passes(choices.passes)
    objective = Objective(metric=choices.objective, slos_ms=dict(parse_slo(s) for s in choices.slo))
    capacity = _capacity_plan(choices, objective, workload, arrival)  # refused here, before any request
    key = _api_key(choices.api_key_env)
    root = server_root(url)
    server = asyncio.run(_probe(root, choices.model, key, choices.api_key_env, engine.endpoints.models))
    evaluator = VllmEvaluator(
        spec=LaunchSpec(model=server.model, api_key=key, api_key_env=choices.api_key_env),
        workload=workload,
        arrival=arrival,
        log_dir=Path(),  # nothing is launched, so no log is written
        warmup_requests=choices.warmup,
        history=choices.history,
        slos_ms=objective.request_slos,
        engine=engine,
        engine_label=f"{engine.name} {server.version} at {root}" if server.version else f"server at {root}",
        passes=passes,
        capacity=capacity,
    )
    record = evaluator.measure_running(root, server.model)
    return BenchResult(
        server=server,
        record=record,
        workload=workload,
        arrival=arrival,
        passes=passes,
        slos_ms=dict(objective.slos_ms),
    )


async def _probe(url: str, model: str | None, key: str | None, key_env: str | None, path: str) -> ServerFacts:
    async with replay_client(max_in_flight=4, timeout=httpx.Timeout(10.0)) as client:
        return await probe_server(
            client, url, model=model, api_key=key, api_key_env=key_env, models_path=path
        )
