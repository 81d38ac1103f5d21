"""The study loop with real Optuna and real SQLite, and an in-process evaluator instead of vLLM."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from autotune.bench import RequestTiming, summarize
from autotune.errors import StorageError
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    BASELINE_ATTR,
    Figures,
    Objective,
    TrialHooks,
    TrialPolicy,
    TrialRecord,
    TrialReport,
    TrialStatus,
    best_feasible,
    completed_trials,
    constraints_hold,
    load_or_create,
    run_study,
    suggest_values,
)
from tests.fakes.evaluators import OverWords, over_words

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = SearchSpace.model_validate(
    {
        "name": "t",
        "platform": "cuda",
        "parameters": {
            "block_size": {"type": "categorical", "choices": [16, 32, 64], "flag": "--block-size"},
            "offload_gb": {
                "type": "categorical",
                "choices": [0, 8],
                "flag": "--kv-offloading-size",
                "off_value": 0,
            },
            "threshold": {
                "type": "int",
                "low": 0,
                "high": 256,
                "step": 64,
                "condition": {"param": "offload_gb", "greater_than": 0},
                "json_flag": "--kv-transfer-config",
                "json_path": "kv_connector_extra_config.threshold",
            },
        },
    }
)


def _timings(ttft_s: float, *, n_ok: int = 4, n_failed: int = 0) -> list[RequestTiming]:
    ok = [
        RequestTiming(f"r{i}", None, 0.0, 0.0, ttft_s, ttft_s + 0.09, (0.01,) * 9, 10, 16)
        for i in range(n_ok)
    ]
    bad = [
        RequestTiming(f"f{i}", None, 0.0, 0.0, None, None, (), 0, None, error="HTTP 500")
        for i in range(n_failed)
    ]
    return ok + bad


class FakeEvaluator(OverWords):
    """Made-up but deterministic measurements per configuration (output throughput = 40 tokens / duration).

    baseline (no flag): ttft 250 ms, 100 tok/s   block 16: ttft 100 ms, but two requests fail
    block 32:           ttft 200 ms, 100 tok/s   block 64: ttft 150 ms, 50 tok/s (below 95 % of baseline)
    any offload: the engine refuses to start (like the CPU build does).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[int, RenderedConfig]] = []

    def measure(self, number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        self.calls.append((number, rendered))
        args = list(rendered.args)
        if "--kv-offloading-size" in args:
            return TrialRecord(
                status=TrialStatus.FAILED,
                command=("vllm", "serve", *args),
                failure="bad_flag",
                reason="CPU Offloading is currently only supported on CUDA-alike and XPU GPUs",
            )
        block = args[args.index("--block-size") + 1] if "--block-size" in args else None
        ttft, duration, failed = {None: (0.25, 0.4, 0), "16": (0.1, 0.4, 2), "32": (0.2, 0.4, 0)}.get(
            block, (0.15, 0.8, 0)
        )
        figures = Figures(summarize(_timings(ttft, n_failed=failed), duration).as_dict())
        return TrialRecord(status=TrialStatus.OK, command=("vllm", "serve", *args), figures=figures)


@pytest.fixture
def storage_url(tmp_path: Path) -> Iterator[str]:
    """A real SQLite study file; in RAM where the machine has /dev/shm (fsyncs make /tmp ~10x slower)."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else tmp_path) as d:
        yield f"sqlite:///{Path(d) / 'study.db'}"


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The trials with an outcome, measured or not (the study's own view)."""
    return completed_trials(study)


def _run_configs(study: optuna.Study, evaluator: FakeEvaluator, objective: Objective, *configs: dict) -> None:
    """Baseline first, then exactly ``configs`` (enqueued, so the sampler does not choose)."""
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, 1)
    for params in configs:
        study.enqueue_trial(params)
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, len(configs))


def test_trial_0_is_the_baseline_with_no_params_and_no_rendered_flags(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    evaluator = FakeEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, 3)

    number, rendered = evaluator.calls[0]
    assert number == 0
    assert rendered.args == () and dict(rendered.env) == {}
    first = _complete(study)[0]
    assert first.number == 0
    assert first.user_attrs[BASELINE_ATTR] is True
    assert first.params == {}
    assert first.user_attrs["rendered_args"] == []
    assert first.value == pytest.approx(250.0)
    later = _complete(study)[1:]
    assert len(later) == 2
    assert all(not t.user_attrs.get(BASELINE_ATTR) and "block_size" in t.params for t in later)


def test_resuming_a_study_does_not_run_the_baseline_again(storage_url: str) -> None:
    objective = Objective()
    evaluator = FakeEvaluator()
    run_study(
        load_or_create(storage_url, "s", objective, seed=0),
        TrialPolicy(space=SPACE, objective=objective),
        evaluator,
        1,
    )
    study = load_or_create(storage_url, "s", objective, seed=0)
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, 2)
    assert [bool(t.user_attrs.get(BASELINE_ATTR)) for t in _complete(study)] == [True, False, False]
    assert [rendered.args == () for _, rendered in evaluator.calls][1:] == [False, False]


def test_resuming_with_another_objective_is_refused(storage_url: str) -> None:
    load_or_create(storage_url, "s", Objective(metric="ttft_p90"), seed=0)
    with pytest.raises(StorageError, match="ttft_p90"):
        load_or_create(storage_url, "s", Objective(metric="e2el_p99"), seed=0)
    with pytest.raises(StorageError, match="output_throughput"):
        load_or_create(storage_url, "s", Objective(metric="output_throughput"), seed=0)


def test_constraints_are_stored_on_each_trial_for_the_sampler(storage_url: str) -> None:
    objective = Objective(slos_ms={"ttft_p90": 300.0})
    study = load_or_create(storage_url, "s", objective, seed=0)
    _run_configs(study, FakeEvaluator(), objective, {"block_size": 32, "offload_gb": 0})
    baseline, tuned = _complete(study)
    for t in (baseline, tuned):
        # Optuna's own record by name, the one its samplers read (Trial.set_constraint) ...
        named = {k: v for k, v in t.constraints.items() if not k.isdigit()}
        assert set(named) == set(objective.constraint_names())
        assert named == dict(zip(t.user_attrs["constraint_names"], t.user_attrs["constraints"], strict=True))
        # ... and the constraints_func convention's list, which optuna-dashboard reads
        assert t.system_attrs["constraints"] == list(t.user_attrs["constraints"])
        assert all(v <= 0 for v in t.constraints.values())
    assert tuned.constraints["slo:ttft_p90"] == pytest.approx((200.0 - 300.0) / 300.0)


def test_a_failed_start_is_an_infeasible_trial_with_its_reason(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)
    reports: list[TrialReport] = []
    evaluator = FakeEvaluator()
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, 1)
    study.enqueue_trial({"block_size": 32, "offload_gb": 8, "threshold": 64})
    run_study(
        study, TrialPolicy(space=SPACE, objective=objective), evaluator, 1, TrialHooks(on_done=reports.append)
    )
    failed = _complete(study)[1]
    assert failed.user_attrs["status"] == "failed"
    # as Optuna keeps a trial without a value: PRUNED, no sentinel objective, constraints violated
    assert failed.state is optuna.trial.TrialState.PRUNED and failed.value is None
    assert "CPU Offloading" in failed.user_attrs["reason"]
    assert any(v > 0 for v in failed.constraints.values())
    assert not constraints_hold(failed.user_attrs["constraints"])
    (report,) = reports
    assert report.number == failed.number
    assert report.value is None and not report.feasible
    assert report.best_number == 0  # the baseline stays the best


def test_best_feasible_never_picks_an_infeasible_trial_even_with_a_better_value(storage_url: str) -> None:
    objective = Objective(min_throughput_ratio=0.95)
    study = load_or_create(storage_url, "s", objective, seed=0)
    _run_configs(
        study,
        FakeEvaluator(),
        objective,
        {"block_size": 16, "offload_gb": 0},  # ttft 100 ms, failed requests
        {"block_size": 64, "offload_gb": 0},  # ttft 150 ms, half the baseline's throughput
        {"block_size": 32, "offload_gb": 8, "threshold": 0},  # does not start
        {"block_size": 32, "offload_gb": 0},  # ttft 200 ms, feasible
    )
    by_block = {(t.params.get("block_size"), t.params.get("offload_gb")): t for t in _complete(study)}
    assert by_block[(16, 0)].value == pytest.approx(100.0)
    assert by_block[(64, 0)].value == pytest.approx(150.0)
    assert by_block[(64, 0)].constraints["throughput_vs_baseline"] == pytest.approx(0.45)
    assert by_block[(16, 0)].constraints["failed_requests"] == 2
    best = best_feasible(study)
    assert best is not None
    assert best.params == {"block_size": 32, "offload_gb": 0}
    assert best.value == pytest.approx(200.0)


def test_best_feasible_is_none_when_nothing_is_feasible(storage_url: str) -> None:
    objective = Objective()
    study = load_or_create(storage_url, "s", objective, seed=0)

    @over_words
    def always_fails(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        return TrialRecord(status=TrialStatus.FAILED, failure="out_of_memory", reason="CUDA out of memory")

    run_study(study, TrialPolicy(space=SPACE, objective=objective), always_fails, 2)
    assert len(_complete(study)) == 2
    assert best_feasible(study) is None


def test_maximised_objective_picks_the_highest_feasible_value(storage_url: str) -> None:
    objective = Objective(metric="output_throughput", min_throughput_ratio=0.0)
    study = load_or_create(storage_url, "s", objective, seed=0)
    _run_configs(study, FakeEvaluator(), objective, {"block_size": 64, "offload_gb": 0})
    best = best_feasible(study)
    assert best is not None and best.number == 0  # 100 tok/s beats 50 tok/s
    assert best.value == pytest.approx(100.0)


def test_a_parameter_whose_condition_does_not_hold_is_not_suggested() -> None:
    off = suggest_values(optuna.trial.FixedTrial({"block_size": 32, "offload_gb": 0, "threshold": 64}), SPACE)
    assert off == {"block_size": 32, "offload_gb": 0}
    on = suggest_values(optuna.trial.FixedTrial({"block_size": 32, "offload_gb": 8, "threshold": 64}), SPACE)
    assert on == {"block_size": 32, "offload_gb": 8, "threshold": 64}


def test_unsupported_parameters_are_never_suggested() -> None:
    space = SearchSpace.model_validate(
        {
            "name": "t",
            "platform": "cpu",
            "parameters": {
                "block_size": {"type": "categorical", "choices": [32, 64], "flag": "--block-size"},
                "offload_gb": {
                    "type": "categorical",
                    "choices": [0, 8],
                    "flag": "--kv-offloading-size",
                    "unsupported": "not on the CPU build",
                },
            },
        }
    )
    assert suggest_values(optuna.trial.FixedTrial({"block_size": 64, "offload_gb": 8}), space) == {
        "block_size": 64
    }


ONE_CONFIG = SearchSpace.model_validate(  # one configuration: every later trial re-proposes it
    {
        "name": "d",
        "platform": "cpu",
        "parameters": {"bs": {"type": "categorical", "choices": [32], "flag": "--b"}},
    }
)


def test_a_re_proposed_configuration_reuses_the_earlier_measurement(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A vLLM start costs a minute on a GPU: a config the sampler proposes again is not re-run."""
    calls: list[tuple[str, ...]] = []

    @over_words
    def evaluator(number, rendered, listener=None):  # type: ignore[no-untyped-def]
        calls.append(rendered.args)
        t = [RequestTiming("r", None, 0.0, 0.0, 0.01, 0.02, (0.01,), 2, 5)]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(t, 1.0).as_dict()))

    obj = Objective()
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "dup", obj, seed=0)
    run_study(study, TrialPolicy(space=ONE_CONFIG, objective=obj), evaluator, 4)
    assert calls == [(), ("--b", "32")]  # baseline and the only config; trials 2 and 3 reuse trial 1
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.user_attrs.get("duplicate_of") for t in trials] == [None, None, 1, 1]
    assert trials[3].value == trials[1].value and trials[3].constraints == trials[1].constraints


def test_a_re_proposed_configuration_that_was_pruned_is_not_launched_again(tmp_path: Path) -> None:
    """On the H200 the sampler re-proposed pruned configurations: 5 of 19 launches in two studies,
    none better the second time. The earlier verdict (and its reports) is reused instead."""
    calls: list[tuple[str, ...]] = []

    @over_words
    def evaluator(number, rendered, listener=None):  # type: ignore[no-untyped-def]
        calls.append(rendered.args)
        if rendered.args:  # the only configuration: its trial reports twice, then the pruner stops it
            listener.checkpoint(1, {"percentiles_ms": {"ttft_p90": 500.0}})
            listener.checkpoint(2, {"percentiles_ms": {"ttft_p90": 520.0}})
            return TrialRecord(
                status=TrialStatus.PRUNED, failure="pruned", reason="ttft_p90 520 is 2x the best"
            )
        t = [RequestTiming("r", None, 0.0, 0.0, 0.01, 0.02, (0.01,), 2, 5)]
        return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(t, 1.0).as_dict()))

    obj = Objective()
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "dup", obj, seed=0)
    run_study(study, TrialPolicy(space=ONE_CONFIG, objective=obj), evaluator, 4)
    assert calls == [(), ("--b", "32")]  # trials 2 and 3 did not start an engine
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "PRUNED", "PRUNED"]
    assert [t.user_attrs.get("duplicate_of") for t in trials] == [None, None, 1, 1]
    assert trials[3].intermediate_values == trials[1].intermediate_values
    assert "2x the best" in (trials[3].user_attrs.get("reason") or "")
