"""A short study on the real CPU build with a space that names its parameters its own way and with
batching, block size and sequences fixed by the user (one study, two engine starts: the baseline and
the prior's pick):

- the prior finds the KV size, prefix caching and the (fixed) block size by role and its candidate
  runs; the host clamp finds the renamed pool by role and the sampler never sees a pool the host
  cannot hold;
- the fixed flags take the renamed parameters that set them out of the search (found by flag, a
  value outside the space's choices used as the user set it), and every engine it launched, the
  baseline included, ran with the fixed values, which vLLM itself read."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import optuna
import pytest

from tests.conftest import real_rag_workload, wait_no_processes
from tests.e2e.test_cli import _autotune

pytestmark = pytest.mark.vllm(alongside=True)  # what each trial carried, not how fast it ran

# search_spaces/cpu.yaml's knobs under other names; the pool renders an environment variable the CPU
# build ignores (as LMCache's size does on a GPU), so it is tunable here, and 100000 GiB fits no host.
# The step's tokens, the block size and the sequences are fixed below (FIXED): 64 and 8 are none of
# their choices.
SPACE = """
name: renamed
platform: cpu
parameters:
  kv_size: {role: kv_bytes, type: categorical, choices: [8, 64], format: "{}M", flag: --kv-cache-memory-bytes}
  step_tokens: {role: batched_tokens, type: categorical, choices: [256, 2048], flag: --max-num-batched-tokens}
  seqs: {role: max_seqs, type: categorical, choices: [16, 128], flag: --max-num-seqs}
  kv_block: {role: block_size, type: categorical, choices: [32, 128], flag: --block-size, default: 128}
  caching: {role: prefix_caching, type: bool, flag: --enable-prefix-caching, default: true}
  host_pool: {role: kv_pool, type: categorical, choices: [0, 100000], off_value: 0, env: AUTOTUNE_TEST_POOL_GIB}
"""
FIXED = {"--max-num-batched-tokens": "1024", "--block-size": "64", "--max-num-seqs": "8"}


def test_a_renamed_space_with_fixed_flags_keeps_the_priors_candidate_the_host_clamp_and_the_fixed_values(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    (tmp_path / "space.yaml").write_text(SPACE)
    args = [
        "run", "--workload", str(real_rag_workload(tmp_path / "rag.jsonl")), "--model", str(tiny_model),
        "--space", str(tmp_path / "space.yaml"), "--study", "renamed", "--studies-dir", str(tmp_path / "s"),
        "--n-trials", "2", "--confirm-rounds", "0", "--passes", "1", "--no-prune",  # the baseline, the prior's pick
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=1024",
        "--baseline-arg=--kv-cache-memory-bytes=32M",  # vLLM's default (0.92 of host RAM) may not fit beside others
        *(f"--engine-arg={flag}={value}" for flag, value in FIXED.items()),
    ]  # fmt: skip
    p = _autotune(args, mark, tmp_path)  # the tool as a user runs it; it ends every engine it started
    stdout, stderr = p.communicate(timeout=540)
    res = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    out = res.stdout + res.stderr
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not wait_no_processes(mark)
    for flag, value in FIXED.items():
        assert f"fixed by you ({flag} {value}); not one of the space's choices" in out, out[-3000:]
    assert "prior: best memory setting kv_size=" in out, out[-3000:]
    # the prior reads the block size by role, at the value the user fixed
    assert re.search(r"prior: .* prefix cache serves [\d.]+% of them at block 64;", out), out[-3000:]
    study = optuna.load_study(study_name="renamed", storage=f"sqlite:///{tmp_path / 's' / 'renamed.db'}")
    trials = study.get_trials()
    informed = [t for t in trials if t.user_attrs.get("informed")]
    assert informed and informed[0].user_attrs["status"] == "ok", [(t.number, t.user_attrs) for t in trials]
    assert informed[0].params["kv_size"] == 64 and informed[0].user_attrs["predicted"]["gpu_kv_tokens"] > 0
    pools = [t.distributions["host_pool"] for t in trials if "host_pool" in t.distributions]
    assert pools and all(d.choices == (0,) for d in pools), pools  # clamped: 100000 GiB is never offered

    launched = [t for t in trials if t.user_attrs.get("status") == "ok"]
    assert len(launched) == 2 and launched[0].user_attrs["baseline"] is True, [
        (t.number, t.user_attrs.get("status"), t.user_attrs.get("reason")) for t in trials
    ]
    for t in trials:
        assert not {"step_tokens", "kv_block", "seqs"} & set(t.params), t.params
        command = t.user_attrs["command"]
        for flag, value in FIXED.items():
            at = [i for i, tok in enumerate(command) if tok == flag]
            assert len(at) == 1 and command[at[0] + 1] == value, (flag, command)
    for t in launched:  # what vLLM read: its own log of the arguments it was given
        log = (tmp_path / "s" / "renamed" / f"trial-{t.number:04d}.log").read_text()
        said = next(ln for ln in log.splitlines() if "non-default args" in ln)
        assert "'max_num_batched_tokens': 1024" in said and "'block_size': 64" in said, said
        assert "'max_num_seqs': 8" in said, said
