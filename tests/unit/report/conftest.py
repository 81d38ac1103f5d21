"""Studies for the report tests: real Optuna and SQLite, an in-process evaluator instead of vLLM
that writes per-request timings next to the study as the real one does."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from autotune.bench import RequestTiming, summarize
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    Figures,
    Metrics,
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    load_or_create,
    run_study,
)
from autotune.trial import write_request_timings
from tests.fakes.evaluators import OverWords

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = SearchSpace.model_validate(
    {
        "name": "t",
        "platform": "cuda",
        "parameters": {
            "block_size": {"type": "categorical", "choices": [16, 32, 64], "flag": "--block-size"},
            "max_num_seqs": {"type": "categorical", "choices": [8, 64, 256], "flag": "--max-num-seqs"},
        },
    }
)
ONE_PARAM = SearchSpace.model_validate(
    {
        "name": "one",
        "platform": "cuda",
        "parameters": {
            "block_size": {"type": "categorical", "choices": [16, 32, 64], "flag": "--block-size"},
        },
    }
)
# TTFT (s) per block size; the baseline (no flag) is the slowest. max_num_seqs=8 starves throughput.
TTFT_S = {None: 0.40, "16": 0.10, "32": 0.20, "64": 0.30}
EVIDENCE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def timings_for(ttft_s: float, n: int = 20) -> list[RequestTiming]:
    """``n`` successful requests whose TTFTs spread evenly from ``ttft_s`` to twice that."""
    out = []
    for i in range(n):
        ttft = ttft_s * (1 + i / (n - 1))
        latency = ttft + 0.01 * 15
        out.append(RequestTiming(f"r{i}", None, i * 0.1, i * 0.1, ttft, latency, (0.01,) * 15, 16, 100))
    return out


class FakeEvaluator(OverWords):
    """Deterministic trials: TTFT by block size, throughput by max_num_seqs; ``--max-num-seqs 256``
    with ``--block-size 64`` runs out of memory (the engine never starts)."""

    def __init__(self, log_dir: Path, *, fail_all: bool = False) -> None:
        self.log_dir = log_dir
        self.fail_all = fail_all

    def measure(self, number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
        args = list(rendered.args)
        command = ("vllm", "serve", "/models/tiny", "--max-model-len", "2048", "--port", "8000", *args)
        block, seqs = _flag(args, "--block-size"), _flag(args, "--max-num-seqs")
        if self.fail_all or (block == "64" and seqs == "256"):
            return TrialRecord(
                status=TrialStatus.FAILED,
                command=command,
                failure="out_of_memory",
                reason="vLLM exited during start-up (out of memory)",
                evidence=f"root cause: {EVIDENCE}\nINFO some earlier line\n{EVIDENCE}",
                timings_s={"startup": 12.0},
            )
        timings = timings_for(TTFT_S[block])
        duration = 2.0 if seqs == "8" else 1.0
        path = write_request_timings(timings, self.log_dir / f"trial-{number:04d}.requests.npz")
        return TrialRecord(
            status=TrialStatus.OK,
            command=command,
            figures=Figures(summarize(timings, duration).as_dict()),
            metrics=Metrics({"prefix_hit_rate": 0.5 if block else 0.25, "host_hit_rate": None}),
            requests_path=str(path),
            kv_tokens=4096 if block else 2048,
            kv_max_concurrency=2.0,
            timings_s={"startup": 30.0, "warmup": 1.0, "measure": duration, "teardown": 1.0},
            memory={"gpu_used_peak": [3 * 2**30], "rss_peak": 2 * 2**30},
            engine="vllm 0.32.0 (test)",
        )


StudyMaker = Callable[..., optuna.Study]


@pytest.fixture
def studies_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the studies live: in RAM where the machine has /dev/shm (SQLite's fsyncs make /tmp slow)."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else tmp_path) as d:
        yield Path(d) / "studies"


@pytest.fixture
def make_study(studies_dir: Path) -> StudyMaker:
    """``make_study(configs, space=SPACE, fail_all=False)``: the baseline, then exactly ``configs``."""

    def make(
        configs: list[dict[str, object]],
        *,
        space: SearchSpace = SPACE,
        fail_all: bool = False,
        name: str = "s",
    ) -> optuna.Study:
        studies = studies_dir
        (studies / name).mkdir(parents=True, exist_ok=True)
        objective = Objective(min_throughput_ratio=0.9)
        study = load_or_create(f"sqlite:///{studies / f'{name}.db'}", name, objective, seed=0)
        study.set_user_attr("engine_profile", "cuda-native")
        evaluator = FakeEvaluator(studies / name, fail_all=fail_all)
        run_study(study, TrialPolicy(space=space, objective=objective), evaluator, 1)
        for params in configs:
            study.enqueue_trial(params)
        if configs:
            run_study(study, TrialPolicy(space=space, objective=objective), evaluator, len(configs))
        return study

    return make


# Five tuned trials: two fast ones, one starved of throughput (violates the throughput constraint),
# one out of memory, one slower.
CONFIGS: list[dict[str, object]] = [
    {"block_size": 16, "max_num_seqs": 64},
    {"block_size": 32, "max_num_seqs": 256},
    {"block_size": 16, "max_num_seqs": 8},
    {"block_size": 64, "max_num_seqs": 256},
    {"block_size": 64, "max_num_seqs": 64},
    {"block_size": 32, "max_num_seqs": 64},
]
