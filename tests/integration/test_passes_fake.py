"""Repeated passes on one started engine and early stopping, against the fake server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pytest

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.space import EngineConfig, load_search_space
from autotune.study import (
    IncumbentPruner,
    Objective,
    TrialPolicy,
    TrialStatus,
    load_or_create,
    read_record,
    run_study,
)
from autotune.trial import DEV_MODE_ENV, PassPlan, VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import FAKE_LAUNCHER, MARK_ENV

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _workload(path: Path, n: int = 16, gap: float = 0.01) -> Path:
    doc = " ".join(f"w{i % 50}" for i in range(300))
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"{doc} q{i}", "max_tokens": 2, "timestamp": i * gap}) + "\n")
    return path


@dataclass(frozen=True)
class Answers:
    """A trial listener whose checkpoints answer as ``answer`` says; the engine's start goes unheard."""

    answer: Callable[[int, object], str | None]

    def engine_up(self) -> None:
        pass

    def checkpoint(self, step: int, figures: object) -> str | None:
        return self.answer(step, figures)


def _evaluator(
    tmp_path: Path, mark: str, passes: int, env: dict[str, str] | None = None, n: int = 16, gap: float = 0.01
) -> VllmEvaluator:
    spec = LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_TTFT_SCALE": "5", **(env or {})},
        fixed_args=(("--max-model-len", "1024"),),
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    wl = load_workload(_workload(tmp_path / "wl.jsonl", n, gap))
    return VllmEvaluator(
        spec=spec, workload=wl, arrival=ArrivalSpec(mode="timestamps"), log_dir=tmp_path, warmup_requests=0,
        passes=PassPlan(count=passes),
    )  # fmt: skip


def test_three_passes_on_one_engine_with_the_cache_emptied_between_them(tmp_path: Path, mark: str) -> None:
    rec = _evaluator(tmp_path, mark, 3, dict(DEV_MODE_ENV))(0, EngineConfig())
    assert rec.status is TrialStatus.OK, rec.reason
    assert len(rec.passes) == 3 and rec.figures is not None and rec.figures.completed == 3 * 16
    hits = [p["prefix_hit_rate"] for p in rec.passes]
    assert hits[0] > 0.5 and max(hits) - min(hits) < 0.02  # each pass starts from an empty cache
    assert not [n for n in rec.notes if "cache" in n], rec.notes  # the reset emptied it
    # between the passes only: without warm-up requests there is nothing to empty before pass 1
    assert (tmp_path / "trial-0000.log").read_text().count("prefix cache reset") == 2
    values = rec.pass_values("ttft_p90")
    assert sorted(values)[1] == pytest.approx(rec.figures.get("ttft_p90"), abs=1e-3)  # the median pass
    assert rec.pass_spread("ttft_p90") is not None


def test_a_reset_that_leaves_the_cache_full_is_said_on_the_record(tmp_path: Path, mark: str) -> None:
    rec = _evaluator(tmp_path, mark, 2, {**DEV_MODE_ENV, "FAKE_RESET_KEEPS": "1"}, n=4)(0, EngineConfig())
    assert rec.status is TrialStatus.OK
    assert any("did not empty every cache tier" in n for n in rec.notes), rec.notes


def test_without_dev_mode_the_trial_keeps_its_first_pass_and_says_why(tmp_path: Path, mark: str) -> None:
    rec = _evaluator(tmp_path, mark, 3)(0, EngineConfig())
    assert rec.status is TrialStatus.OK and len(rec.passes) == 1
    assert any("404" in n and "VLLM_SERVER_DEV_MODE=1" in n for n in rec.notes), rec.notes


# The pruning tests compare a trial with the incumbent's worst pass at the same point. On a shared
# 2-core CI host that is a race against the host: the fresh-clone CI of 8b5db67 (scale 20) pruned the
# good trial at 1.69x the baseline (85 ms over modelled TTFTs of 80-160 ms), and that of d2b93d8 (scale
# 60) at 3.13x (894.5 ms against 285.8; pass 1 of the good trial ran about 1.5 s a request while the
# other worker started real vLLM: a stall of the host, not of the configuration). So the trials here
# are far apart and the pruner's floor is wide: the good trial is 2.2x faster than the baseline (block
# size 64, 16,384 batched tokens; the fake's defaults are 128 and 2,048), the starved one (8M) 10x
# slower than the good one, and nothing within 2.5x of the incumbent is pruned: a stall must slow the
# good trial 5.5x to prune it, or its reference 4x to spare the starved one. TTFT ~200-550 ms (scale
# 60), requests 0.15 s apart.
PRUNE_ENV = {**DEV_MODE_ENV, "FAKE_TTFT_SCALE": "60", "FAKE_STARVED_FACTOR": "10"}
PRUNE_GAP = 0.15
PRUNER = IncumbentPruner(floor=1.5)
GOOD = {"kv_cache_memory_bytes": 64, "block_size": 64, "max_num_batched_tokens": 16384}
STARVED = {**GOOD, "kv_cache_memory_bytes": 8}

SPACE = """
name: fake
platform: cpu
parameters:
  kv_cache_memory_bytes: {type: categorical, choices: [8, 64], format: "{}M", flag: --kv-cache-memory-bytes}
  block_size: {type: categorical, choices: [64, 128], flag: --block-size}
  max_num_batched_tokens: {type: categorical, choices: [2048, 16384], flag: --max-num-batched-tokens}
"""


def test_a_trial_far_worse_than_the_incumbent_is_pruned_and_the_baseline_never_is(
    tmp_path: Path, mark: str
) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    space = load_search_space(tmp_path / "space.yaml")
    evaluator = _evaluator(tmp_path, mark, 2, PRUNE_ENV, gap=PRUNE_GAP)
    objective = Objective()
    study = load_or_create(f"sqlite:///{tmp_path}/s.db", "s", objective, seed=0)
    study.enqueue_trial(GOOD)
    study.enqueue_trial(STARVED)  # a starved pool: 10x the good trial's time to first token
    run_study(study, TrialPolicy(space=space, objective=objective, pruner=PRUNER), evaluator, 3)
    states = [t.state for t in study.trials]
    assert states[:2] == [optuna.trial.TrialState.COMPLETE] * 2
    assert states[2] == optuna.trial.TrialState.PRUNED
    rec = read_record(study.trials[2])
    assert rec.status is TrialStatus.PRUNED and rec.reason and "noise margin" in rec.reason
    assert rec.figures is not None and 0 < rec.figures.completed < 2 * 16  # stopped before its last pass
    assert study.trials[0].intermediate_values  # the baseline reports too, it is just never pruned


def test_a_study_with_a_pruned_trial_renders_in_the_table_and_the_report(tmp_path: Path, mark: str) -> None:
    from autotune.report import write_study_report
    from autotune.usecases import study_table

    (tmp_path / "space.yaml").write_text(SPACE)
    space = load_search_space(tmp_path / "space.yaml")
    objective = Objective()
    study = load_or_create(f"sqlite:///{tmp_path}/s.db", "s", objective, seed=0)
    study.enqueue_trial(GOOD)
    study.enqueue_trial(STARVED)
    run_study(study, TrialPolicy(space=space, objective=objective, pruner=PRUNER), _evaluator(tmp_path, mark, 2, PRUNE_ENV, gap=PRUNE_GAP), 3)  # fmt: skip
    assert study.trials[2].state == optuna.trial.TrialState.PRUNED
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(study_table(study, "ttft_p90"))
    text = console.export_text()
    assert "pruned" in text and "2 passes" in text
    html = write_study_report(study, tmp_path / "report.html").read_text()
    assert "pruned" in html


def test_the_last_checkpoint_of_the_last_pass_never_stops_a_trial(tmp_path: Path, mark: str) -> None:
    """Seen on the H200: a one-pass trial 'pruned' at 4/4 of its requests had run in full, saved
    nothing and lost its figures. The end of a pass with more to come still stops the trial."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = _evaluator(tmp_path / "one", mark, 1, dict(DEV_MODE_ENV), n=8)
    last = one.checkpoints

    def stop_at_the_end_of_a_pass(step: int, partial: object) -> str | None:
        return "worse than the incumbent" if step > 0 and step % last == 0 else None

    rec = one(0, EngineConfig(), listener=Answers(stop_at_the_end_of_a_pass))
    assert rec.status is TrialStatus.OK, rec.reason
    assert rec.figures is not None and rec.figures.completed == 8
    two = _evaluator(tmp_path / "two", mark, 2, dict(DEV_MODE_ENV), n=8)
    rec = two(0, EngineConfig(), listener=Answers(stop_at_the_end_of_a_pass))
    assert rec.status is TrialStatus.PRUNED and len(rec.passes) == 1  # its second pass was saved


def test_the_connectors_own_log_lines_of_the_measured_passes_are_on_the_record(
    tmp_path: Path, mark: str
) -> None:
    """LMCache's lookup lines (FAKE_LMCACHE_LOG prints them as LMCacheConnectorV1 does) of the
    measured requests only: the warm-up's lines come before the mark and are left out."""
    ev = _evaluator(tmp_path, mark, 1, {"FAKE_LMCACHE_LOG": "1"}, n=6)
    ev.warmup_requests = 2
    rec = ev(0, EngineConfig())
    assert rec.status is TrialStatus.OK, rec.reason
    assert rec.metrics is not None
    assert rec.metrics.raw["lmcache_requests"] == 6  # not 8: the two warm-up requests are left out
    assert rec.metrics.raw["lmcache_hit_tokens"] and rec.metrics.raw["lmcache_load_share"]
    assert any(n.startswith("LMCache's log: 6 requests looked up") for n in rec.notes), rec.notes


def test_the_workload_shaped_warm_up_primes_no_prefix_and_pass_one_starts_from_an_empty_cache(
    tmp_path: Path, mark: str
) -> None:
    """The warm-up sends the workload's longest prompts with their words shuffled: one pass measures
    the same prefix hits with it as without it (the unshuffled prompts would hit the shared document
    from the first request). With repeated passes the cache is emptied after it too, so pass 1
    starts as every later pass does."""
    (tmp_path / "cold").mkdir()
    (tmp_path / "warm").mkdir()
    cold = _evaluator(tmp_path / "cold", mark, 1)
    warm = _evaluator(tmp_path / "warm", mark, 1)
    warm.warmup_requests = 2
    rates = []
    for ev in (cold, warm):
        rec = ev(0, EngineConfig())
        assert rec.status is TrialStatus.OK and rec.metrics is not None, rec.reason
        rates.append(rec.metrics.prefix_hit_rate)
    assert rates[0] == pytest.approx(rates[1]) and rates[0] > 0.5

    repeated = _evaluator(tmp_path, mark, 2, dict(DEV_MODE_ENV))
    repeated.warmup_requests = 2
    rec = repeated(0, EngineConfig())
    assert rec.status is TrialStatus.OK, rec.reason
    log_text = (tmp_path / "trial-0000.log").read_text()
    assert log_text.count("prefix cache reset") == 2  # after the warm-up, and between the passes


def test_a_slow_report_does_not_hold_the_replay(tmp_path: Path, mark: str) -> None:
    """A checkpoint's report writes the study's storage; on the CPU build one SQLite commit held the
    replayer 0.5 s while requests were in flight (their TTFT measured the tool, not vLLM). Reports
    now run on a thread of their own: a report that takes 0.4 s delays no request's send, and every
    report still arrives, in order, before the trial ends."""
    ev = _evaluator(tmp_path, mark, 1, n=16, gap=0.05)
    steps: list[int] = []

    def slow_report(step: int, partial: object) -> str | None:
        if step > 0:
            time.sleep(0.4)
            steps.append(step)
        return None

    rec = ev(0, EngineConfig(), listener=Answers(slow_report))
    assert rec.status is TrialStatus.OK, rec.reason
    assert steps == list(range(1, ev.checkpoints + 1))
    assert rec.requests_path is not None
    got = np.load(rec.requests_path)
    lag = got["sent"] - got["scheduled"]
    assert float(lag.max()) < 0.2, lag  # on the loop, the first report alone made it 0.35 s or more
