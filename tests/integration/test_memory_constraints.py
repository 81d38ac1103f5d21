"""Memory-aware trials: infeasible before launch, classified after a failed start, swap = infeasible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.engine._launch import parse_engine_args
from autotune.memory import GiB, SwapReading
from autotune.space import SearchSpace
from autotune.study import Objective, TrialPolicy, best_feasible, load_or_create, run_study
from autotune.trial import MemoryGuard, VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, RealStudy
from tests.unit.conftest import FakeProbe


def _workload(path: Path, n: int = 8) -> Path:
    doc = " ".join(f"w{i % 40}" for i in range(200))
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"{doc} q{i}", "max_tokens": 4, "timestamp": i * 0.05}) + "\n")
    return path


class SwappingProbe(FakeProbe):
    """A host that swaps in 16 MiB between any two readings."""

    def swap(self) -> SwapReading:
        self.swap_calls += 1
        return SwapReading(8 * GiB, 1 * GiB, self.swap_calls * 16 * 2**20, 0)


SPACE = SearchSpace.model_validate(
    {
        "name": "mem",
        "platform": "cpu",
        "parameters": {
            "kv_cache_memory_bytes": {
                "type": "categorical",
                "choices": [1, 32],
                "format": "{}M",
                "flag": "--kv-cache-memory-bytes",
            },
            "block_size": {"type": "categorical", "choices": [16, 64], "flag": "--block-size"},
        },
    }
)


def test_host_swapping_makes_a_fast_trial_infeasible(tmp_path: Path, mark: str) -> None:
    """The fake server is fast; the machine-facts seam says the host swapped 64 MiB during the run."""
    probe = SwappingProbe(host=(24 * GiB, 20 * GiB))
    guard = MemoryGuard.for_model(str(REPO / "tests" / "data" / "model_configs"), "cpu", probe=probe)
    assert guard is None  # not a model directory: no config.json there
    cfg_dir = tmp_path / "model"
    cfg_dir.mkdir()
    (cfg_dir / "config.json").write_text(
        (REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text()
    )
    guard = MemoryGuard.for_model(str(cfg_dir), "cpu", probe=probe)
    assert guard is not None
    spec = LaunchSpec(
        model=str(cfg_dir),
        launcher=FAKE_LAUNCHER,
        fixed_args=parse_engine_args(["--max-model-len=1024", "--kv-cache-memory-bytes=32M"]),
        env={MARK_ENV: mark},
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    wl = load_workload(_workload(tmp_path / "wl.jsonl"))
    ev = VllmEvaluator(
        spec=spec, workload=wl, arrival=ArrivalSpec(mode="timestamps"), log_dir=tmp_path, memory=guard
    )
    obj = Objective()
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "swap", obj, seed=0)
    run_study(study, TrialPolicy(space=SPACE, objective=obj), ev, 1)
    t = study.get_trials()[0]
    a = t.user_attrs
    assert a["status"] == "ok" and a["figures"]["failed"] == 0  # it ran, and fast
    assert a["memory"]["swap_in_bytes"] >= 16 * 2**20
    assert any("swapped" in v for v in a["violations"])
    assert not Objective.is_feasible(a["constraints"])
    assert best_feasible(study) is None


@pytest.mark.vllm
@pytest.mark.timeout(1200)  # it may be the first to wait for the shared study (see test_real_vllm_study.py)
def test_real_study_with_configs_that_cannot_fit(real_study: RealStudy) -> None:
    """The session's shared real study (tests/conftest.py) ran with a memory guard; its trial 2 asks
    for 1 MiB of KV (512 tokens < one 1024-token request), its trial 3 for block size 16."""
    study, logs = real_study.study, real_study.root / "logs"
    trials = study.get_trials()
    base, small, bad_block = trials[0], trials[2], trials[3]
    assert (small.params["kv_cache_memory_bytes"], bad_block.params["block_size"]) == (1, 16)
    assert base.user_attrs["baseline"] and base.user_attrs["status"] == "ok"
    assert small.user_attrs["status"] == "infeasible" and small.user_attrs["failure"] == "does_not_fit"
    assert "1,024" in small.user_attrs["reason"] or "1024" in small.user_attrs["reason"]
    assert not (logs / f"trial-{small.number:04d}.log").exists()  # never launched
    assert bad_block.user_attrs["status"] == "failed"
    assert bad_block.user_attrs["failure"] == "bad_flag", bad_block.user_attrs["log_tail"]
    assert "No common block size for 16" in bad_block.user_attrs["reason"]
    best = best_feasible(study)
    # the best is one that vLLM ran (the baseline was the only one before trial 1 joined)
    assert best is not None and best.number in {t.number for t in trials[:2]}
    assert base.user_attrs["memory"]["rss_peak"] > 100 * 2**20  # the vLLM process tree was measured
