"""``autotune bench`` against a real CPU-build vLLM that the test started agrees with a study trial's
measurement of the same configuration (issue 36): two engine starts, one each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.bench import ArrivalSpec
from autotune.engine import VLLM, LaunchSpec
from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
from autotune.space import EngineConfig
from autotune.study import TrialRecord
from autotune.trial import DEV_MODE_ENV, PassPlan, VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import MARK_ENV, REAL_FIXED, REPO, real_rag_workload

pytestmark = pytest.mark.vllm

# The host's noise: runs of one configuration on the 2-core CPU build, restarted, differ by 5-25% in
# TTFT on a quiet machine, and beside the other xdist worker far more: one command measured 28-87 ms
# p50 TTFT in one night (commit 11eaae0), and the fresh-clone CI of d7591f4 read 35.6 ms (bench) vs
# 22.3 ms (the trial), 1.59x, while counts, tokens, hits and throughput held their bounds; so TTFT is held to 3x.
# Output throughput follows the file's arrivals (tokens over the span from the first send to the last
# reply), but the last reply's latency is in that span: the CI of cf05132 (stop 42) read 48.95 tok/s
# (bench) vs 43.59 tok/s (the trial), 12.3% apart, TTFT p50 17.1 vs 14.9 ms; so throughput is held
# to 25%. The prefix cache serves the same tokens each time.
# TPOT is not compared: 8-token replies of this tiny model take 3-7 ms a token, the size of the other
# processes' CPU bursts (one run at load average 9 on 2 cores: bench 6.8 ms, the trial 3.2 ms, while
# TTFT p50 read 49.6 and 59.5 ms, throughput 42.5 and 42.4 tok/s, prefix hits 65.0% both).
TTFT_FACTOR, THROUGHPUT_SHARE, HIT_POINTS = 3.0, 0.25, 0.02


def _figures(rec: TrialRecord) -> dict[str, float]:
    assert rec.ok and rec.figures is not None and rec.metrics is not None, rec.reason
    hit = rec.metrics.prefix_hit_rate
    assert hit is not None
    return {
        "completed": rec.figures.completed,
        "tokens": float(rec.figures.raw["total_output_tokens"]),
        "ttft_p50": rec.figures.metric("ttft_p50"),
        "tpot_p50": rec.figures.metric("tpot_p50"),
        "output_throughput": rec.figures.output_throughput,
        "prefix_hit_rate": hit,
    }


def test_bench_of_a_running_server_agrees_with_a_trial_of_its_configuration(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    wl = real_rag_workload(tmp_path / "rag.jsonl")
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(REAL_FIXED),
        env={MARK_ENV: mark, **DEV_MODE_ENV},  # the prefix cache emptied between the two passes
        startup_timeout_s=240,
        cache_dir=tmp_path / "cache",
    )
    evaluator = VllmEvaluator(
        spec=spec,
        workload=load_workload(wl),
        arrival=ArrivalSpec(mode="timestamps"),
        log_dir=tmp_path / "logs",
        passes=PassPlan(count=2),
    )
    trial = _figures(evaluator(0, EngineConfig()))

    out = tmp_path / "bench.json"
    with VLLM.process(spec, EngineConfig(), tmp_path / "server.log") as server:  # the test's server
        server.wait_healthy()
        res = subprocess.run(
            [sys.executable, "-m", "autotune", "bench", "--url", server.base_url, "--workload", str(wl),
             "--passes", "2", "--json-out", str(out)],
            env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        server.check_alive()  # bench stopped nothing
    assert res.returncode == 0, res.stderr
    assert "TTFT" in res.stdout and "GPU hits" in res.stdout, res.stdout
    record = TrialRecord.from_attrs(json.loads(out.read_text()))
    assert len(record.passes) == 2  # both passes ran: the cache was emptied between them, as in a trial
    bench = _figures(record)

    assert bench["completed"] == trial["completed"] == 20 and bench["tokens"] == trial["tokens"]
    assert abs(bench["prefix_hit_rate"] - trial["prefix_hit_rate"]) <= HIT_POINTS, (bench, trial)
    assert abs(bench["output_throughput"] / trial["output_throughput"] - 1) <= THROUGHPUT_SHARE, (
        bench,
        trial,
    )
    assert 1 / TTFT_FACTOR <= bench["ttft_p50"] / trial["ttft_p50"] <= TTFT_FACTOR, (bench, trial)
    assert bench["tpot_p50"] > 0 and trial["tpot_p50"] > 0
