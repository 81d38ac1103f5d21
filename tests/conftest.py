from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
import yaml

if TYPE_CHECKING:
    import optuna

    from autotune.engine._argcheck import VllmArgChecker
    from autotune.space import SearchSpace

REPO = Path(__file__).resolve().parent.parent
FAKE_VLLM = REPO / "tests" / "fakes" / "fake_vllm.py"
FAKE_LAUNCHER = (sys.executable, str(FAKE_VLLM))
MARK_ENV = "AUTOTUNE_TEST_MARK"


_GROUPS: dict[str, set[int]] = {}


def processes_marked(mark: str) -> list[psutil.Process]:
    """Live processes we started under ``mark``: those whose environment carries
    ``AUTOTUNE_TEST_MARK=mark``, and every member of their process groups. vLLM's engine-core
    processes rename themselves (setproctitle), which overwrites their /proc environ, so they are
    found through the group their guardian leads; groups seen once are remembered."""
    groups = _GROUPS.setdefault(mark, set())
    procs = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            procs.append(p)
            if p.environ().get(MARK_ENV) == mark and os.getpgid(p.pid) == p.pid:
                groups.add(p.pid)  # a group our engine leads (its guardian), not the test runner's
        except (psutil.Error, OSError):
            continue
    found = []
    for p in procs:
        try:
            if os.getpgid(p.pid) in groups or p.environ().get(MARK_ENV) == mark:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def wait_no_processes(mark: str, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = processes_marked(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_marked(mark)
    return left


@pytest.fixture
def mark() -> Iterator[str]:
    """A marker for engines started by one test; the test fails if any of them outlives it."""
    value = uuid.uuid4().hex
    yield value
    left = wait_no_processes(value)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, f"engine processes outlived the test: {[_argv_head(p) for p in left]}"


def _argv_head(p: psutil.Process) -> list[str] | str:
    """The first words of a process's command line (a zombie or a gone process: said so)."""
    try:
        return p.cmdline()[:4]
    except psutil.Error as exc:
        return f"pid {p.pid}: {type(exc).__name__}"


FAKE_SPACE = """
name: fake
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64, 128], flag: --block-size}
  max_num_batched_tokens: {type: categorical, choices: [256, 1024, 4096], flag: --max-num-batched-tokens}
  enable_prefix_caching: {type: bool, flag: --enable-prefix-caching}
"""


def write_fake_space(folder: Path) -> Path:
    """The three-parameter CPU space of the fake-server study tests, as ``folder/space.yaml``."""
    path = folder / "space.yaml"
    path.write_text(FAKE_SPACE)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from autotune.tiny_model import make_tiny_model

    cache = os.environ.get("AUTOTUNE_TEST_MODEL_DIR")
    target = Path(cache) if cache else tmp_path_factory.mktemp("models") / "tiny"
    return make_tiny_model(target)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_vllm = os.environ.get("AUTOTUNE_SKIP_VLLM") == "1"
    for item in items:
        if skip_vllm and "vllm" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="AUTOTUNE_SKIP_VLLM=1"))


@dataclass(frozen=True)
class RealStudy:
    """One study measured on the real CPU build of vLLM, shared by the tests that only read it.

    Trials: 0 the baseline; 1 and 2 pinned tuned values that vLLM runs; 3 a KV size that cannot
    hold one request (refused before launch); 4 a block size CPU attention refuses (a failed start).
    """

    study: optuna.Study
    root: Path  # logs/ (one log per trial), cache/ (the study's vLLM cache root)
    model: Path
    checker: VllmArgChecker  # vLLM's own argument parser, still open


REAL_FIXED = ["--enforce-eager", "--max-model-len=1024", "--kv-cache-memory-bytes=32M"]
REAL_PINNED = (
    {
        "kv_cache_memory_bytes": 16,
        "max_num_batched_tokens": 512,
        "block_size": 64,
        "enable_prefix_caching": True,
    },
    {
        "kv_cache_memory_bytes": 32,
        "max_num_batched_tokens": 1024,
        "block_size": 32,
        "enable_prefix_caching": False,
    },
    {"kv_cache_memory_bytes": 1, "block_size": 64},  # 512 KV tokens < one 1024-token request
    {"kv_cache_memory_bytes": 32, "block_size": 16},  # CPU attention refuses block size 16
)


def real_rag_workload(path: Path) -> Path:
    """Ten requests over two shared 300-word documents, 0.2 s apart."""
    rng = random.Random(3)
    words = [
        "cache",
        "token",
        "prefix",
        "memory",
        "block",
        "batch",
        "latency",
        "model",
        "request",
        "document",
        "policy",
    ]
    docs = [" ".join(rng.choice(words) for _ in range(300)) for _ in range(2)]
    with path.open("w") as f:
        for i in range(10):
            q = " ".join(rng.choice(words) for _ in range(12))
            f.write(
                json.dumps({"prompt": f"{docs[i % 2]}\nQ: {q}", "max_tokens": 8, "timestamp": i * 0.2}) + "\n"
            )
    return path


def _real_space() -> SearchSpace:
    """search_spaces/cpu.yaml as shipped, plus the two values that cannot run (1 MiB, block 16)."""
    from autotune.space import SearchSpace

    raw = yaml.safe_load((REPO / "search_spaces" / "cpu.yaml").read_text())
    raw["parameters"]["kv_cache_memory_bytes"]["choices"].insert(0, 1)
    raw["parameters"]["block_size"]["choices"].insert(0, 16)
    return SearchSpace.model_validate(raw)


@pytest.fixture(scope="session")
def real_study(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStudy]:
    """Five trials of one study on real vLLM (three engines run, one refused, one failed start),
    measured once per session; no engine of it outlives the study."""
    from autotune.bench import ArrivalSpec
    from autotune.engine import LaunchSpec
    from autotune.engine._argcheck import VllmArgChecker
    from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
    from autotune.study import Objective, load_or_create, run_study
    from autotune.trial import DEV_MODE_ENV, MemoryGuard, PassPlan, VllmEvaluator
    from autotune.workload import load_workload

    root = tmp_path_factory.mktemp("real_study")
    value = uuid.uuid4().hex
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(REAL_FIXED),
        env={MARK_ENV: value, **DEV_MODE_ENV},
        startup_timeout_s=240,
        cache_dir=root / "cache",
    )
    obj = Objective(metric="ttft_p90", min_throughput_ratio=0.5)
    study = load_or_create(f"sqlite:///{root / 'study.db'}", "real", obj, seed=7)
    for params in REAL_PINNED:
        study.enqueue_trial(params)
    guard = MemoryGuard.for_model(str(tiny_model), "cpu")
    assert guard is not None
    with VllmArgChecker() as checker:
        evaluator = VllmEvaluator(
            spec=spec,
            workload=load_workload(real_rag_workload(root / "rag.jsonl")),
            arrival=ArrivalSpec(mode="timestamps"),
            log_dir=root / "logs",
            arg_checker=checker,
            memory=guard,
            passes=PassPlan(count=2),  # two replays per engine, vLLM's prefix cache emptied between them
        )
        try:
            run_study(study=study, space=_real_space(), evaluator=evaluator, objective=obj, n_trials=5)
        finally:
            left = wait_no_processes(value)
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        assert not left, f"engine processes outlived the study: {[_argv_head(p) for p in left]}"
        yield RealStudy(study=study, root=root, model=tiny_model, checker=checker)
