from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def write_two_model_group(
    folder: Path, kv: str = "48M", engine_args: str = "--enforce-eager, --max-model-len=2048"
) -> Path:
    """The README's two models as a group file ``folder/group.yaml``: rag (8 layers, examples/rag.jsonl)
    and chat (2 layers, examples/support_chat.jsonl) sharing ``kv`` of KV."""
    from autotune.tiny_model import make_tiny_model

    l8, l2 = make_tiny_model(folder / "l8", layers=8), make_tiny_model(folder / "l2", layers=2)
    path = folder / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}}}
share: {{kv_cache_memory_bytes: {kv}}}
engine_args: [{engine_args}]
""")
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


def _marks(nodeid: str) -> list[Any]:
    """The marks of the test ``nodeid`` (its own, its class's and its module's), read from the
    imported test module, as pytest-xdist's controller sees only node ids."""
    path, _, rest = nodeid.partition("::")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    marks: list[object] = [module]
    obj: object = module
    for name in rest.partition("[")[0].split("::") if rest else ():
        obj = getattr(obj, name, None)
        marks.append(obj)
    found = []
    for owner in marks:
        own = getattr(owner, "pytestmark", [])
        found += own if isinstance(own, list) else [own]
    # a MarkDecorator (``pytestmark = pytest.mark.x``) holds its Mark
    return [getattr(m, "mark", m) for m in found]


def starts_vllm(nodeid: str) -> bool:
    """Does the test ``nodeid`` carry the ``vllm`` mark?"""
    return vllm_group(nodeid) is not None


VLLM_GROUPS = ("vllm", "vllm-alongside")


def vllm_group(nodeid: str) -> str | None:
    """The real-vLLM group of ``nodeid``: ``vllm`` for the tests whose assertions rest on measured
    figures (or on the session fixtures ``real_study`` and ``real_nights``), ``vllm-alongside`` for
    those marked ``vllm(alongside=True)`` (their assertions are about what an engine does, not
    how fast: they may run beside one other engine); None for a test that starts no vLLM."""
    found = [m for m in _marks(nodeid) if m.name == "vllm"]
    if not found:
        return None
    return VLLM_GROUPS[1] if any(m.kwargs.get("alongside") for m in found) else VLLM_GROUPS[0]


if importlib.util.find_spec("xdist") is not None:

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
        """Under ``--dist loadgroup`` (``make test``: ``-n 2``) the tests that start real vLLM are
        two groups (:func:`vllm_group`), each run one test after another by one worker, the two
        groups on two workers, each from the worker's start: at most two CPU-build engines of two
        tests at once on a 2-core machine, one of them never a measuring test's neighbour of its
        own kind, and the session fixtures ``real_study`` and ``real_nights`` built once.
        (pytest-xdist 3.8 cannot name the group of a pytest 9 item itself: it sets
        ``item._nodeid``, which pytest 9 no longer reads.)"""
        from xdist.scheduler import LoadGroupScheduling

        if config.getvalue("dist") != "loadgroup":
            return None

        class VllmTestsApart(LoadGroupScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return vllm_group(nodeid) or super()._split_scope(nodeid)

            def _assign_work_unit(self, node: Any) -> None:
                # the longest work first, one vLLM group per worker: a worker that has none yet
                # takes the next one still queued before anything else
                given = self.assigned_work.get(node, {})
                if not any(g in given for g in VLLM_GROUPS):
                    for group in VLLM_GROUPS:
                        if group in self.workqueue:
                            self.workqueue.move_to_end(group, last=False)
                            break
                super()._assign_work_unit(node)

        return VllmTestsApart(config, log)


@dataclass(frozen=True)
class RealStudy:
    """One study measured on the real CPU build of vLLM, shared by the tests that only read it.

    Trials: 0 the baseline; 1 pinned tuned values that vLLM runs (half the baseline's KV, prefix
    caching off); 2 a KV size that cannot hold one request (refused before launch); 3 a block size
    CPU attention refuses (a failed start).
    """

    study: optuna.Study
    root: Path  # logs/ (one log per trial), cache/ (the study's vLLM cache root)
    model: Path
    checker: VllmArgChecker  # vLLM's own argument parser, still open


REAL_FIXED = ["--enforce-eager", "--max-model-len=1024", "--kv-cache-memory-bytes=32M"]
REAL_PINNED = (
    {
        "kv_cache_memory_bytes": 16,
        "max_num_batched_tokens": 1024,
        "block_size": 64,
        "enable_prefix_caching": False,
    },
    {"kv_cache_memory_bytes": 1, "block_size": 64},  # 512 KV tokens < one 1024-token request
    {"kv_cache_memory_bytes": 32, "block_size": 16},  # CPU attention refuses block size 16
)


def real_rag_workload(path: Path, n: int = 10) -> Path:
    """``n`` (ten) requests over two shared 300-word documents, 0.2 s apart."""
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
        for i in range(n):
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
    """Four trials of one study on real vLLM (two engines run, one refused, one failed start),
    measured once per session; no engine of it outlives the study."""
    from autotune.bench import ArrivalSpec
    from autotune.engine import LaunchSpec
    from autotune.engine._argcheck import VllmArgChecker
    from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
    from autotune.study import Objective, TrialPolicy, load_or_create, run_study
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
            run_study(study, TrialPolicy(space=_real_space(), objective=obj), evaluator, len(REAL_PINNED) + 1)
        finally:
            left = wait_no_processes(value)
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
        assert not left, f"engine processes outlived the study: {[_argv_head(p) for p in left]}"
        yield RealStudy(study=study, root=root, model=tiny_model, checker=checker)


@dataclass(frozen=True)
class RealNights:
    """The nightly loop as an operator runs it, on the RAG example and the real CPU build, once per
    session through the CLI (``real_nights``): ``run`` exports a config, a night promotes over it and
    ``nightly rollback`` restores it; what each printed, the study, the export and the Git repository
    that the ``--on-promote`` hook commits promotions into."""

    root: Path
    studies: Path  # rag.db, rag/night-000N/ (logs, per-request .npz, the night's report)
    out: Path  # the export (best.yaml): written by run, promoted by night 1, then rolled back
    gitops: Path  # the hook's Git repository: vllm.yaml, one commit per delivered promotion
    run: subprocess.CompletedProcess[str]
    run_export: bytes  # best.yaml as run wrote it
    night: subprocess.CompletedProcess[str]  # night 1
    rollback: subprocess.CompletedProcess[str]


REAL_NIGHT_SPACE = """name: night
platform: cpu
parameters:
  max_num_batched_tokens: {type: categorical, choices: [2048], flag: --max-num-batched-tokens}
"""
GIT_COMMIT_HOOK = (
    'cp "$AUTOTUNE_NEW_CONFIG" {repo}/vllm.yaml && git -C {repo} add vllm.yaml && '
    'git -C {repo} -c user.name=autotune -c user.email=a@b commit -q -m "night $AUTOTUNE_NIGHT: '
    '$AUTOTUNE_OBJECTIVE $AUTOTUNE_BEST_VALUE"'
)


@pytest.fixture(scope="session")
def real_nights(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> RealNights:
    """``run`` measures the throttled baseline (``--baseline-arg`` 8 batched tokens a step) as its
    one trial and exports it to ``best.yaml``: the deployed file. At 8 tokens the baseline saturates
    (p50 TTFT 3.9 s against 27 ms at 2,048 on this AVX-512 host, 2026-12-05; 16 tokens read 1.2 s
    here but 32 ms on a faster CI host, where the 2,048 candidate beside the other worker's engine
    start read 50 ms, so night 1 promoted nothing).
    Night 1: its incumbent is that file (the run's export, "deployed"; the study's baseline is the
    same command, measured as one arm), a search of one candidate (2,048 batched tokens), confirmed
    against the incumbent and promoted (a 10% floor), its export committed into a local Git
    repository by ``--on-promote``.
    ``nightly rollback`` then puts the run's export back (no engine).
    Five engine starts: the run's one, night 1's re-measurement, its candidate and its promotion
    check's two. What a next night does is the fake server's (tests/e2e/test_nightly_incumbent.py: a
    best that is the deployed command is "kept (same config)", nothing written, no hook; after a
    rollback the next night measures the restored file): the logic is the tool's, and night 1 reads a
    real export back as an incumbent (the run's, found to be the baseline's command) on real vLLM.
    A trial must reach half the baseline's throughput, not the default 95%: at ``--speed 3`` the replay
    lasts about 5 s, and a stall of this 2-core host while the other pytest-xdist worker starts an
    engine once stretched the candidate's last requests (saturated, under 95%), so night 1 had no
    feasible candidate. No pruning: beside the benchmark tests a run of vLLM's defaults once measured 2.4x the
    baseline's and was pruned, so nothing was promoted. Flagging a real regression is tested on the
    fake server. No engine outlives a command."""
    root = tmp_path_factory.mktemp("real_nights")
    value = uuid.uuid4().hex
    gitops = root / "gitops"
    subprocess.run(["git", "init", "-q", str(gitops)], check=True)
    (root / "space.yaml").write_text(REAL_NIGHT_SPACE)
    out = root / "best.yaml"
    common = [
        "--study", "rag", "--workload", str(REPO / "examples" / "rag.jsonl"),
        "--model", str(tiny_model), "--studies-dir", str(root / "studies"), "--no-check-args",
        "--space", str(root / "space.yaml"), "--speed", "3", "--passes", "1", "--objective", "ttft_p50",
        "--out", str(out), "--no-prune", "--min-throughput-ratio", "0.5",
        "--baseline-arg=--max-num-batched-tokens=8",
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
        "--engine-arg=--kv-cache-memory-bytes=20M",
    ]  # fmt: skip
    night = [
        "nightly", *common, "--rounds", "1", "--max-trials", "2", "--budget", "12m",
        "--on-promote", GIT_COMMIT_HOOK.format(repo=gitops),
    ]  # fmt: skip
    env = {**os.environ, MARK_ENV: value, "PYTHONPATH": str(REPO)}

    def autotune(*args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [sys.executable, "-m", "autotune", *args],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
        finally:
            left = wait_no_processes(value, timeout=20)
            for p in left:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            assert not left, (
                f"engine processes outlived `autotune {args[0]}`: {[_argv_head(p) for p in left]}"
            )

    run = autotune("run", *common, "--n-trials", "1", "--confirm-rounds", "0")
    run_export = out.read_bytes() if out.exists() else b""
    night1 = autotune(*night, "--min-improvement", "0.1")
    rollback = autotune(
        "nightly", "rollback", "--study", "rag", "--studies-dir", str(root / "studies"), "--out", str(out)
    )
    return RealNights(
        root=root,
        studies=root / "studies",
        out=out,
        gitops=gitops,
        run=run,
        run_export=run_export,
        night=night1,
        rollback=rollback,
    )
