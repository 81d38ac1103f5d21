"""Real vLLM (CPU build) refuses an empty prompt with HTTP 400; the trial names its line and id
(issue 30, item 2: the 400 came back in every trial and nothing said which line it was)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import psutil
import pytest

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
from autotune.space import RenderedConfig
from autotune.study import TrialStatus
from autotune.trial import VllmEvaluator
from autotune.workload import ChatMessage, Workload, WorkloadRequest
from tests.conftest import MARK_ENV, REAL_FIXED, wait_no_processes

pytestmark = pytest.mark.vllm(alongside=True)


def test_real_vllm_refuses_an_empty_prompt_and_the_trial_names_its_line(
    tiny_model: Path, tmp_path: Path
) -> None:
    # built directly: load_workload now refuses these lines before any trial
    requests = (
        WorkloadRequest(index=0, line=1, id="q1", max_tokens=4, prompt="the cache holds a prefix"),
        WorkloadRequest(index=1, line=2, id="q-empty", max_tokens=4, prompt=""),
        WorkloadRequest(index=2, line=3, id="c-empty", max_tokens=4, messages=(ChatMessage("user", ""),)),
    )
    workload = Workload(path=Path("w.jsonl"), requests=requests)
    mark = uuid.uuid4().hex
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(REAL_FIXED),
        env={MARK_ENV: mark},
        startup_timeout_s=240,
        cache_dir=tmp_path / "cache",
    )
    evaluator = VllmEvaluator(
        spec=spec,
        workload=workload,
        arrival=ArrivalSpec(mode="closed", concurrency=1),
        log_dir=tmp_path,
        warmup_requests=0,
    )
    try:
        rec = evaluator(0, RenderedConfig(args=()))
    finally:
        left = wait_no_processes(mark)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
    assert not left

    assert rec.status is TrialStatus.OK and rec.figures is not None, rec.reason
    # vLLM 0.32 (CPU) answered the empty prompt 400 and served the empty chat message (this model's
    # template adds role markers); the loader refuses both before a trial
    (reason,) = [r for r in rec.figures.failures if "q-empty" in r]
    assert reason.startswith("HTTP 400: Either prompt or prompt_embeds must be provided and non-empty.")
    assert reason.endswith("(at w.jsonl:2, id 'q-empty')") and rec.figures.failed == 1
