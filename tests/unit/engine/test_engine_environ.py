"""The engine's environment: autotune's own less the secrets vLLM has no use for (issue 30, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import LaunchSpec
from autotune.engine._environ import engine_environ
from autotune.space import RenderedConfig

SHELL = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0",
    "NCCL_DEBUG": "INFO",
    "OMP_NUM_THREADS": "4",
    "LD_LIBRARY_PATH": "/opt/lib",
    "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD": "256",  # a vLLM knob, not a secret
    "TOKENIZERS_PARALLELISM": "false",
    "HF_TOKEN": "hf_gated_access",  # vLLM downloads gated models with it
    "AWS_SECRET_ACCESS_KEY": "aws-for-s3-models",  # s3:// models (Run:ai streamer)
    "LMCACHE_CONFIG_FILE": "/etc/lmcache.yaml",
    "AUTOTUNE_STORAGE": "postgresql://tuner:pg-Secret-1@db/tune",
    "AUTOTUNE_STORAGE_URL": "postgresql://tuner@db/tune",
    "PGPASSWORD": "pg-Secret-2",
    "PGPASSFILE": "/home/u/.pgpass",
    "MY_KEY": "sk-the-api-key",
    "VLLM_API_KEY": "sk-inherited-other",
    "GITHUB_TOKEN": "ghp_x",
    "OPENAI_API_KEY": "sk-openai",
    "DB_PASSWORD": "db-pw",
    "AUTOTUNE_TEST_MARK": "m",  # not a secret: passes
}


def test_the_tools_secrets_and_secret_looking_names_are_withheld_and_what_vllm_reads_passes() -> None:
    env = engine_environ(SHELL, api_key="sk-the-api-key", api_key_env="MY_KEY")
    assert sorted(set(SHELL) - set(env)) == [
        "AUTOTUNE_STORAGE",
        "AUTOTUNE_STORAGE_URL",
        "DB_PASSWORD",
        "GITHUB_TOKEN",
        "MY_KEY",
        "OPENAI_API_KEY",
        "PGPASSFILE",
        "PGPASSWORD",
        "VLLM_API_KEY",
    ]
    assert env["HF_TOKEN"] == "hf_gated_access" and env["VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD"] == "256"


def test_the_keys_source_goes_by_its_value_when_its_name_is_not_known() -> None:
    env = engine_environ({"SERVING_CRED": "sk-k3y-value", "OTHER": "x"}, api_key="sk-k3y-value")
    assert env == {"OTHER": "x"}


def test_pass_env_lets_a_secret_looking_name_through_but_never_the_tools_own() -> None:
    env = engine_environ(SHELL, api_key="sk-the-api-key", pass_env=("GITHUB_TOKEN", "PGPASSWORD", "MY_KEY"))
    assert env["GITHUB_TOKEN"] == "ghp_x"
    assert "PGPASSWORD" not in env and "MY_KEY" not in env


def test_process_env_gives_the_key_only_as_vllm_api_key_and_the_run_dir_as_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SHELL.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    spec = LaunchSpec(
        model="m", api_key="sk-the-api-key", api_key_env="MY_KEY", env={"GITHUB_TOKEN": "given"}
    )
    env = spec.process_env(RenderedConfig(args=()), tmp_path)
    assert [k for k, v in env.items() if "sk-the-api-key" in v] == ["VLLM_API_KEY"]
    assert not any("pg-Secret" in v for v in env.values())
    assert env["GITHUB_TOKEN"] == "given"  # what autotune itself sets for the engine wins
    assert env["TMPDIR"] == env["VLLM_RPC_BASE_PATH"] == str(tmp_path)
    inductor = Path(env["TORCHINDUCTOR_CACHE_DIR"])
    assert inductor.name.startswith("torchinductor_")
    assert tmp_path not in inductor.parents  # the compile cache outlives the engine's folder
