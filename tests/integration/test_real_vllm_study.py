"""A real study on the real CPU build of vLLM, end to end, and its export read back by vLLM's parser."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from autotune.bench import ArrivalSpec
from autotune.engine import CPU_LAUNCHER, LaunchSpec, VllmArgChecker, parse_engine_args
from autotune.export import export_best
from autotune.space import load_search_space
from autotune.study import Objective, load_or_create, run_study
from autotune.trial import DEV_MODE_ENV, PassPlan, VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import MARK_ENV, REPO

pytestmark = pytest.mark.vllm

FIXED = ["--enforce-eager", "--max-model-len=1024", "--kv-cache-memory-bytes=32M"]


def _rag(path: Path) -> Path:
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


def test_three_trial_study_on_real_vllm_exports_a_config_vllm_accepts(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    space = load_search_space(REPO / "search_spaces" / "cpu.yaml")
    wl = load_workload(_rag(tmp_path / "rag.jsonl"))
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(FIXED),
        env={MARK_ENV: mark, **DEV_MODE_ENV},
        startup_timeout_s=240,
        cache_dir=tmp_path / "cache",
    )
    obj = Objective(metric="ttft_p90", min_throughput_ratio=0.5)
    study = load_or_create(f"sqlite:///{tmp_path / 'study.db'}", "real", obj, seed=7)
    # Trials 1 and 2 are pinned so that tuned values differ from the defaults and the export is checkable.
    study.enqueue_trial(
        {
            "kv_cache_memory_bytes": 16,
            "max_num_batched_tokens": 512,
            "block_size": 64,
            "enable_prefix_caching": True,
        }
    )
    study.enqueue_trial(
        {
            "kv_cache_memory_bytes": 32,
            "max_num_batched_tokens": 1024,
            "block_size": 32,
            "enable_prefix_caching": False,
        }
    )
    with VllmArgChecker() as checker:
        evaluator = VllmEvaluator(
            spec=spec,
            workload=wl,
            arrival=ArrivalSpec(mode="timestamps"),
            log_dir=tmp_path / "logs",
            arg_checker=checker,
            passes=PassPlan(count=2),  # two replays per engine, vLLM's prefix cache emptied between them
        )
        run_study(study=study, space=space, evaluator=evaluator, objective=obj, n_trials=3)

        trials = study.get_trials()
        assert len(trials) == 3 and trials[0].user_attrs["baseline"] is True
        for t in trials:
            a = t.user_attrs
            assert a["status"] == "ok", (a.get("reason"), a.get("log_tail"))
            f = a["figures"]
            assert f["completed"] == 2 * 10 and f["failed"] == 0 and len(a["passes"]) == 2
            assert 0 < f["percentiles_ms"]["ttft_p50"] <= f["percentiles_ms"]["ttft_p90"]
            assert f["output_throughput"] > 0
            assert a["metrics"] is not None  # /metrics was read before and after the run
            assert a["timings_s"]["startup"] > 1
            assert a["timings_s"]["startup_imports"] > 0 and a["timings_s"]["startup_init_engine"] > 0
            assert not [n for n in a["notes"] if "cache" in n], a["notes"]  # the reset emptied the cache
            # On a CPU the build was not made for (AVX2 only) vLLM says so in its log, and so does the record.
            fell_back = (
                "Failed to create oneDNN linear"
                in (tmp_path / "logs" / f"trial-{t.number:04d}.log").read_text()
            )
            assert fell_back == any("oneDNN" in n for n in a["notes"]), a["notes"]
        # vLLM's own reset: the second pass of the baseline hits the shared documents as the first did
        h1, h2 = (p["prefix_hit_rate"] for p in trials[0].user_attrs["passes"])
        assert h1 > 0.3 and abs(h1 - h2) < 0.1, (h1, h2)
        assert any((tmp_path / "cache" / "vllm").iterdir())  # vLLM's cache root is the study's
        # The KV capacity line: vLLM sized the cache from the trial's --kv-cache-memory-bytes.
        assert trials[1].user_attrs["kv_tokens"] < trials[0].user_attrs["kv_tokens"]
        # Prefix caching off -> vLLM reports no hits; on -> the shared documents hit.
        assert trials[2].user_attrs["metrics"]["prefix_cache_hits"] == 0
        assert trials[0].user_attrs["metrics"]["prefix_hit_rate"] > 0.3

        # Export the best trial and read it back through the installed vLLM's own parser.
        target = tmp_path / "best.yaml"
        best, _ = export_best(study, out=target)  # the measured command: fixed flags come with it
        parsed = checker.check(["--config", str(target)])
        assert parsed.ok, parsed.error
        assert parsed.args["model"] == str(tiny_model)
        assert parsed.args["enforce_eager"] is True and parsed.args["max_model_len"] == 1024
        for name, value in best.params.items():
            got = parsed.args[name]
            want = value * 2**20 if name == "kv_cache_memory_bytes" else value
            assert got == want, (name, got, want)

        # Every tuned value of every trial arrives too (not just the best one).
        for t in trials[1:]:
            export_path = tmp_path / f"t{t.number}.yaml"
            export_best(study, trial=t, out=export_path)
            data = yaml.safe_load(export_path.read_text())
            got = checker.check(["--config", str(export_path)]).args
            assert got["block_size"] == t.params["block_size"]
            assert got["max_num_batched_tokens"] == t.params["max_num_batched_tokens"]
            assert got["enable_prefix_caching"] is t.params["enable_prefix_caching"]
            assert got["kv_cache_memory_bytes"] == t.params["kv_cache_memory_bytes"] * 2**20
            if not t.params["enable_prefix_caching"]:
                assert data.get("no-enable-prefix-caching") is True and "enable-prefix-caching" not in data


def _argv(fixed: list[str]) -> list[str]:
    return [tok for n, v in parse_engine_args(fixed) for tok in ([n] if v is None else [n, v])]
