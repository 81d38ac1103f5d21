"""A real study on the real CPU build of vLLM, end to end, and its export read back by vLLM's parser.

The study is the session's shared ``real_study`` (tests/conftest.py): measured once, read here and by
tests/integration/test_memory_constraints.py (its refused and failed trials)."""

from __future__ import annotations

import pytest
import yaml

from autotune.engine import FLOAT32_KV_SCALE, serves_float32
from autotune.export import export_best
from tests.conftest import RealStudy

# The first test to ask for the shared study also waits for it: its 4 trials were the work of two
# tests that each ran their own study (600 s each at most, pyproject.toml), so 1200 s.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]


def test_a_real_study_measures_each_trial_with_its_own_flags(real_study: RealStudy) -> None:
    study, logs = real_study.study, real_study.root / "logs"
    trials = study.get_trials()
    assert len(trials) == 4 and trials[0].user_attrs["baseline"] is True
    ran = trials[:2]  # the baseline and the pinned trial vLLM runs (2 and 3 cannot run)
    for t in ran:
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
        fell_back = "Failed to create oneDNN linear" in (logs / f"trial-{t.number:04d}.log").read_text()
        assert fell_back == any("oneDNN" in n for n in a["notes"]), a["notes"]
    # vLLM's own reset: the second pass of the baseline hits the shared documents as the first did
    h1, h2 = (p["prefix_hit_rate"] for p in trials[0].user_attrs["passes"])
    assert h1 > 0.3 and abs(h1 - h2) < 0.1, (h1, h2)
    assert any((real_study.root / "cache" / "vllm").iterdir())  # vLLM's cache root is the study's
    # The KV capacity line: vLLM sized the cache from the trial's --kv-cache-memory-bytes (16M < 32M).
    assert trials[1].user_attrs["kv_tokens"] < trials[0].user_attrs["kv_tokens"]
    # Prefix caching off -> vLLM reports no hits; on (vLLM's default) -> the shared documents hit.
    assert trials[1].user_attrs["metrics"]["prefix_cache_hits"] == 0
    assert trials[0].user_attrs["metrics"]["prefix_hit_rate"] > 0.3


def test_a_real_study_exports_configs_vllm_accepts(
    real_study: RealStudy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    study, checker, out = real_study.study, real_study.checker, tmp_path_factory.mktemp("export")
    trials = study.get_trials()
    # Export the best trial and read it back through the installed vLLM's own parser.
    target = out / "best.yaml"
    best, _ = export_best(study, out=target)  # the measured command: fixed flags come with it
    parsed = checker.check(["--config", str(target)])
    assert parsed.ok, parsed.error
    kv_scale = FLOAT32_KV_SCALE if serves_float32() else 1  # the launched (float32) command's size
    assert parsed.args["model"] == str(real_study.model)
    assert parsed.args["enforce_eager"] is True and parsed.args["max_model_len"] == 1024
    for name, value in best.params.items():
        got = parsed.args[name]
        want = value * 2**20 * kv_scale if name == "kv_cache_memory_bytes" else value
        assert got == want, (name, got, want)

    # Every tuned value of the trial vLLM ran arrives too (not just the best one's).
    for t in trials[1:2]:
        export_path = out / f"t{t.number}.yaml"
        export_best(study, trial=t, out=export_path)
        data = yaml.safe_load(export_path.read_text())
        got = checker.check(["--config", str(export_path)]).args
        assert got["block_size"] == t.params["block_size"]
        assert got["max_num_batched_tokens"] == t.params["max_num_batched_tokens"]
        assert got["enable_prefix_caching"] is t.params["enable_prefix_caching"]
        assert got["kv_cache_memory_bytes"] == t.params["kv_cache_memory_bytes"] * 2**20 * kv_scale
        assert t.params["enable_prefix_caching"] is False  # vllm serve drops `enable-prefix-caching: false`
        assert data.get("no-enable-prefix-caching") is True and "enable-prefix-caching" not in data
