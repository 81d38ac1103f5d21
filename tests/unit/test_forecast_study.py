"""The latency model inside a study (``--predict``, issue 48), on an engine simulated at known costs:
each started trial carries its prediction; a candidate predicted worse than the best beyond the
interval is not started, and the first such one is started anyway (the audit); a model made
deliberately wrong is caught by the audit, and the veto stops with the reason said."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import optuna
import pytest

from autotune.engine import VLLM, sizing_from_argv
from autotune.predict import (
    Candidate,
    EngineCosts,
    LatencyModel,
    Prediction,
    simulate,
    workload_shape,
)
from autotune.space import EngineConfig, RenderedConfig, load_search_space
from autotune.study import (
    BASELINE_ATTR,
    FORECAST_ATTR,
    Figures,
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    read_record,
    run_study,
    standard_gates,
)
from autotune.trial import write_request_timings
from autotune.tuning import StudyForecast, forecast_summary
from autotune.tuning._forecast import STOPPED_ATTR
from autotune.workload import load_workload
from tests.conftest import REPO
from tests.fakes.evaluators import OverWords

SPACE = REPO / "benchmarks" / "data" / "predict_grid_space.yaml"
COSTS = EngineCosts(
    overhead_s=0.006, prefill_s_per_token=25e-6, decode_slowdown_s=0.0, step_s=0.004, step_s_per_seq=0.0004
)
PER_TOKEN = 8192  # KV bytes per token of the simulated engine
BASE_ARGS = ("--kv-cache-memory-bytes=20M",)


def _workload(path: Path) -> Path:
    """Four shared documents of 600 to 1,500 words, 40 questions on them arriving 100 ms apart."""
    docs = [" ".join(f"d{d}w{i}" for i in range(600 + 300 * d)) for d in range(4)]
    with path.open("w") as f:
        for i in range(40):
            prompt = docs[i % 4] + f" question {i}"
            f.write(json.dumps({"prompt": prompt, "max_tokens": 8, "timestamp": i * 0.1}) + "\n")
    return path


@dataclasses.dataclass(frozen=True)
class _Estimate:
    kv_tokens: int
    kv_bytes_per_token: int = PER_TOKEN
    block_size: int = 128


class _Guard:
    """The memory estimate as the forecast reads it: the engine's sizing, KV tokens from the size."""

    def check(self, sizing: Any) -> Any:
        kv = sizing.kv_cache_memory_bytes or 20 * 2**20
        return SimpleNamespace(estimate=_Estimate(kv // PER_TOKEN))


@dataclasses.dataclass
class _Inputs:
    space: Any
    workload: Any
    model: str
    guard: Any = dataclasses.field(default_factory=_Guard)

    def engine_argv(self, tuned_args: Sequence[str] = ()) -> list[str]:
        return ["serve", self.model, *BASE_ARGS, *tuned_args]

    def sizing(self, config: EngineConfig | None = None) -> Any:
        return sizing_from_argv(self.engine_argv(VLLM.render(config or EngineConfig()).args), "cpu")


class _SimulatedEngine(OverWords):
    """An evaluator whose engine is the model's own simulation at :data:`COSTS`: what it measures
    is what an exact model predicts."""

    def __init__(self, inputs: _Inputs, tmp: Path):
        self.inputs, self.tmp = inputs, tmp
        self.shape = workload_shape(inputs.workload, inputs.model)
        self.starts = 0

    def measure(self, number: int, rendered: RenderedConfig, listener: Any = None) -> TrialRecord:
        self.starts += 1
        argv = self.inputs.engine_argv(rendered.args)
        sz = sizing_from_argv(argv, "cpu")
        cand = Candidate(
            "x",
            gpu_kv_tokens=(sz.kv_cache_memory_bytes or 0) // PER_TOKEN,
            block_size=sz.block_size,
            batched_tokens=sz.max_num_batched_tokens,
            max_seqs=sz.max_num_seqs,
            caching="--no-enable-prefix-caching" not in rendered.args,
        )
        shape = self.shape
        sim = simulate(shape.arrivals, shape.outputs, LatencyModel(shape).cache(cand), COSTS, cand.limits)
        n = len(shape.ids)
        timings = [
            SimpleNamespace(
                scheduled=shape.arrivals[i],
                sent=shape.arrivals[i],
                ttft=sim.ttft[i],
                latency=sim.ttft[i] + sim.tpot[i] * (shape.outputs[i] - 1),
                tpot=sim.tpot[i],
                output_tokens=int(shape.outputs[i]),
                status=200,
                ok=True,
                slot_wait=0.0,
            )
            for i in range(n)
        ]
        path = write_request_timings(timings, self.tmp / f"trial-{number}.requests.npz")  # type: ignore[arg-type]
        ms = sim.ttft * 1000
        figures = {
            "percentiles_ms": {"ttft_p50": float(np.percentile(ms, 50)), "ttft_p90": float(np.percentile(ms, 90))},
            "completed": n, "failed": 0, "output_throughput": 100.0,
        }  # fmt: skip
        return TrialRecord(
            status=TrialStatus.OK,
            figures=Figures(figures),
            requests_path=str(path),
            kv_tokens=cand.gpu_kv_tokens,
        )


def _study(
    tmp_path: Path,
    forecast: StudyForecast,
    engine: _SimulatedEngine,
    order: Sequence[Mapping[str, Any]],
    n: int,
) -> optuna.Study:
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=1))
    study.set_user_attr("objective", "ttft_p90")
    study.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})
    for values in order:
        study.enqueue_trial(dict(values))
    policy = TrialPolicy(
        space=forecast.inputs.space,
        objective=Objective(metric="ttft_p90"),
        gates=(*standard_gates(), forecast),
        after_trial=forecast.after_trial,
    )
    return run_study(study, policy, engine, n)


@pytest.fixture
def inputs(tmp_path: Path) -> _Inputs:
    wl = load_workload(_workload(tmp_path / "wl.jsonl"))
    return _Inputs(load_search_space(SPACE), wl, str(tmp_path / "no-model"))


def _cfg(kv: int, batched: int, caching: bool) -> dict[str, Any]:
    return {"kv_cache_memory_bytes": kv, "max_num_batched_tokens": batched, "enable_prefix_caching": caching}


def test_an_exact_model_predicts_vetoes_and_audits(inputs: _Inputs, tmp_path: Path) -> None:
    engine = _SimulatedEngine(inputs, tmp_path)
    forecast = StudyForecast(inputs, "ttft_p90", seed=0)
    study = _study(tmp_path, forecast, engine, (), n=12)
    trials = study.get_trials(deepcopy=False)
    verdicts = {t.number: (t.user_attrs.get(FORECAST_ATTR) or {}).get("verdict") for t in trials}
    started = [t for t in trials if verdicts[t.number] in ("launch", "audit")]
    # every started trial after the baseline carries its prediction, and an exact model is close
    assert started and all(
        abs(t.value / t.user_attrs[FORECAST_ATTR]["ttft_p90_ms"] - 1) < 0.05 for t in started
    )
    assert trials[1].user_attrs.get("forecast_pick")  # the model's picks come right after the baseline
    lines = forecast_summary(study)
    assert lines[0].startswith("ledger: ")
    vetoed = [n for n, v in verdicts.items() if v == "veto"]
    if vetoed:  # a veto is recorded with its numbers and counted
        rec = read_record(trials[vetoed[0]])
        assert rec.status is TrialStatus.INFEASIBLE and rec.failure == "predicted_worse"
        assert "predicted worse: ttft_p90" in (rec.reason or "")
        assert engine.starts < len(trials)
    assert any(v == "audit" for v in verdicts.values()), lines
    assert any("the veto would have been right" in line for line in lines), lines
    assert STOPPED_ATTR not in study.user_attrs
    # the grid's best (KV for the documents, caching on) is among the model's three picks
    best = min((t for t in trials if t.value is not None), key=lambda t: t.value)
    assert (
        best.number <= 3
        and best.params["kv_cache_memory_bytes"] >= 32
        and best.params["enable_prefix_caching"]
    )


def test_a_wrong_model_is_caught_by_the_audit(inputs: _Inputs, tmp_path: Path) -> None:
    """The model is made to predict the large pool with caching 5x slower than it runs: the first
    such candidate is audited, measures better than the best, and the veto stops, saying why."""

    def wrong(p: Prediction) -> Prediction:
        if p.candidate.gpu_kv_tokens < 128 * 2**20 // PER_TOKEN or not p.candidate.caching:
            return p
        iv = dataclasses.replace(p.interval, low=p.interval.low * 5, high=p.interval.high * 5)
        return dataclasses.replace(
            p, ttft_p50_ms=p.ttft_p50_ms * 5, ttft_p90_ms=p.ttft_p90_ms * 5, interval=iv
        )

    engine = _SimulatedEngine(inputs, tmp_path)
    forecast = StudyForecast(inputs, "ttft_p90", seed=0, distort=wrong)
    order = [
        _cfg(32, 2048, True), _cfg(20, 512, True), _cfg(32, 512, False),  # three measured errors
        _cfg(128, 2048, True),  # predicted 5x worse than it is: the audit
        _cfg(128, 512, True),  # predicted worse again: started, the veto has stopped
    ]  # fmt: skip
    study = _study(tmp_path, forecast, engine, order, n=1 + len(order))
    trials = study.get_trials(deepcopy=False)
    by_params = {json.dumps(t.params, sort_keys=True): t for t in trials if t.params}
    audit = by_params[json.dumps(_cfg(128, 2048, True), sort_keys=True)]
    after = by_params[json.dumps(_cfg(128, 512, True), sort_keys=True)]
    assert audit.user_attrs[FORECAST_ATTR]["verdict"] == "audit"
    assert audit.value is not None and after.value is not None  # both started and measured
    assert after.user_attrs[FORECAST_ATTR]["verdict"] == "launch"
    why = study.user_attrs[STOPPED_ATTR]
    assert f"trial {audit.number} was predicted worse" in why and "the veto would have been wrong" in why
    lines = forecast_summary(study)
    assert any(line.startswith("veto stopped: ") for line in lines), lines
    assert any("the veto would have been wrong" in line for line in lines), lines
    finished = [t for t in trials if t.state.is_finished()]
    assert engine.starts == len(finished) == 1 + len(order)  # nothing was vetoed
