"""A short study on the real CPU build with a space that names its parameters its own way: the prior
finds the KV size, the block size and prefix caching by role and its candidate runs; the host clamp
finds the renamed pool by role and the sampler never sees a pool the host cannot hold."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest

from tests.conftest import real_rag_workload, wait_no_processes
from tests.e2e.test_cli import _autotune

pytestmark = pytest.mark.vllm(alongside=True)  # what each trial carried, not how fast it ran

# search_spaces/cpu.yaml's knobs under other names; the pool renders an environment variable the CPU
# build ignores (as LMCache's size does on a GPU), so it is tunable here, and 100000 GiB fits no host.
SPACE = """
name: renamed
platform: cpu
parameters:
  kv_size: {role: kv_bytes, type: categorical, choices: [8, 64], format: "{}M", flag: --kv-cache-memory-bytes}
  kv_block: {role: block_size, type: categorical, choices: [32, 128], flag: --block-size, default: 128}
  caching: {role: prefix_caching, type: bool, flag: --enable-prefix-caching, default: true}
  host_pool: {role: kv_pool, type: categorical, choices: [0, 100000], off_value: 0, env: AUTOTUNE_TEST_POOL_GIB}
"""


def test_a_renamed_space_keeps_the_priors_candidate_and_the_host_clamp_on_real_vllm(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    args = [
        "run", "--workload", str(real_rag_workload(tmp_path / "rag.jsonl")), "--model", str(tiny_model),
        "--space", str(tmp_path / "space.yaml"), "--study", "renamed", "--studies-dir", str(tmp_path / "s"),
        "--n-trials", "2", "--confirm-rounds", "0", "--passes", "1", "--no-prune",  # the baseline, the prior's pick
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=1024",
        "--baseline-arg=--kv-cache-memory-bytes=32M",  # vLLM's default (0.92 of host RAM) may not fit beside others
    ]  # fmt: skip
    p = _autotune(args, mark, tmp_path)  # the tool as a user runs it; it ends every engine it started
    stdout, stderr = p.communicate(timeout=540)
    res = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    out = res.stdout + res.stderr
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not wait_no_processes(mark)
    assert "prior: best memory setting kv_size=" in out, out[-3000:]
    study = optuna.load_study(study_name="renamed", storage=f"sqlite:///{tmp_path / 's' / 'renamed.db'}")
    trials = study.get_trials()
    informed = [t for t in trials if t.user_attrs.get("informed")]
    assert informed and informed[0].user_attrs["status"] == "ok", [(t.number, t.user_attrs) for t in trials]
    assert informed[0].params["kv_size"] == 64 and informed[0].user_attrs["predicted"]["gpu_kv_tokens"] > 0
    pools = [t.distributions["host_pool"] for t in trials if "host_pool" in t.distributions]
    assert pools and all(d.choices == (0,) for d in pools), pools  # clamped: 100000 GiB is never offered
