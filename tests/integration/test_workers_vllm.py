"""Two workers on one study with the real CPU build of vLLM (no GPUs: each engine bound to its own
CPU core): the storage takes two concurrent writers, the baseline is measured once, every trial
is recorded whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.study import read_record
from autotune.studyfile import StudySpec
from autotune.tuning import (
    RUN_ATTR,
    build_setup,
    open_study,
    plan_baseline,
    plan_groups,
    run_parallel,
)
from tests.conftest import MARK_ENV, REPO

pytestmark = pytest.mark.vllm(alongside=True)


def test_two_workers_on_real_vllm_share_one_study(
    tmp_path: Path, tiny_model: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("AUTOTUNE_GPU_LEASE_DIR", str(tmp_path / "leases"))
    choices = StudySpec(
        workload=REPO / "examples" / "rag.jsonl",
        model=str(tiny_model),
        engine_args=("--enforce-eager", "--max-model-len=2048", "--kv-cache-memory-bytes=64M"),
        speed=3.0,
        startup_timeout=300,
        check_args=False,
        min_throughput_ratio=0.3,
        passes="1",  # storage under concurrent writers is the subject, not passes or pruning
        prune=False,
    )
    studies = tmp_path / "studies"
    said: list[str] = []
    with build_setup(choices) as setup:
        groups = plan_groups(setup, None, workers=2)
        opened = open_study(setup, "two", None, studies, 0, plan_baseline(setup))
        run = run_parallel(
            setup, opened.study, opened.directory, groups, storage=None, studies_dir=studies, n_trials=3,
            say=said.append,
        )  # fmt: skip
    assert run.returncodes == {0: 0, 1: 0}, said
    trials = [t for t in opened.study.get_trials() if t.user_attrs.get(RUN_ATTR)]
    assert len(trials) == 3 and {t.user_attrs["worker"] for t in trials} == {0, 1}
    for t in trials:
        rec = read_record(t)
        assert rec.ok, (rec.reason, rec.evidence)
        assert rec.figures is not None and rec.figures.completed == 48 and rec.figures.failed == 0
        assert rec.metrics is not None and rec.kv_tokens
    baselines = [t for t in trials if t.user_attrs.get("baseline")]
    assert len(baselines) == 1 and baselines[0].user_attrs["worker"] == 0
    # the two trials after the baseline ran at the same time, each worker writing to the study
    a, b = sorted((t for t in trials if not t.user_attrs.get("baseline")), key=lambda t: t.number)
    assert a.user_attrs["worker"] != b.user_attrs["worker"]
    assert a.datetime_start < b.datetime_complete and b.datetime_start < a.datetime_complete
    # each engine's OpenMP threads were bound to its own worker's core
    cores = set()
    for t in (a, b):
        log = Path(read_record(t).log_path or "").read_text()
        found = re.search(r"VLLM_CPU_OMP_THREADS_BIND='([^']+)'", log)
        assert found, "no OpenMP binding line in the engine log"
        cores.add(found[1])
    assert len(cores) == 2
