"""A request the server refuses (HTTP 400) is named by its workload line and id in the trial's
record (issue 30: one bad line failed every trial and nothing said which), against the fake server."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.space import EngineConfig
from autotune.study import TrialStatus
from autotune.trial import VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import FAKE_LAUNCHER, MARK_ENV


def _evaluator(tmp_path: Path, mark: str, max_tokens: list[int]) -> VllmEvaluator:
    path = tmp_path / "wl.jsonl"
    with path.open("w") as f:
        for i, n in enumerate(max_tokens):
            f.write(json.dumps({"id": f"q{i}", "prompt": f"a short question {i}", "max_tokens": n}) + "\n")
    spec = LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_CHECK_LENGTH": "1"},
        fixed_args=(("--max-model-len", "256"),),
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    return VllmEvaluator(
        spec=spec,
        workload=load_workload(path),
        arrival=ArrivalSpec(mode="closed", concurrency=1),
        log_dir=tmp_path,
        warmup_requests=0,
    )


def test_a_refused_request_is_named_in_the_figures_and_a_trial_that_served_nothing_in_its_reason(
    tmp_path: Path, mark: str
) -> None:
    wl = tmp_path / "wl.jsonl"
    rec = _evaluator(tmp_path, mark, [2, 2, 4000, 2])(0, EngineConfig())
    assert rec.status is TrialStatus.OK and rec.figures is not None and rec.figures.failed == 1
    ((reason, count),) = rec.figures.failures.items()
    assert reason.startswith("HTTP 400: ") and reason.endswith(f"(at {wl}:3, id 'q2')") and count == 1

    rec = _evaluator(tmp_path, mark, [4000, 4000])(1, EngineConfig())
    assert rec.status is TrialStatus.FAILED and rec.failure == "no_success"
    assert rec.reason is not None and f"(first at {wl}:1, id 'q0')" in rec.reason.split(";")[0], rec.reason
