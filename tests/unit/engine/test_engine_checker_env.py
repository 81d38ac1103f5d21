"""The argument checker only parses flags: it gets what vLLM's import needs and no secret."""

from __future__ import annotations

from autotune.engine._argcheck import checker_env

USER_ENV = {
    "PATH": "/venv/bin:/usr/bin",
    "HOME": "/home/u",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "HF_HOME": "/data/hf",
    "VLLM_CPU_KVCACHE_SPACE": "4",
    "VLLM_TARGET_DEVICE": "cpu",
    "PYTHONPATH": ":/opt/plugins",
    # Secrets and things that are none of the checker's business:
    "VLLM_API_KEY": "sk-vllm",
    "HF_TOKEN": "hf_abc",
    "PGPASSWORD": "pg-secret",
    "AUTOTUNE_STORAGE": "postgresql://u:pw@db/studies",
    "DATABASE_URL": "postgresql://u:pw@db/app",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "GITHUB_TOKEN": "ghp",
    "VLLM_SOME_PASSWORD": "x",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent",
}


def test_secrets_and_unlisted_variables_do_not_reach_the_checker() -> None:
    env = checker_env(USER_ENV)
    for name in (
        "VLLM_API_KEY",
        "HF_TOKEN",
        "PGPASSWORD",
        "AUTOTUNE_STORAGE",
        "DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "VLLM_SOME_PASSWORD",
        "SSH_AUTH_SOCK",
    ):
        assert name not in env, name
    assert not any(secret in env.values() for secret in ("sk-vllm", "hf_abc", "pg-secret", "aws", "ghp"))


def test_what_vllm_needs_to_import_is_kept() -> None:
    env = checker_env(USER_ENV)
    for name in (
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "HF_HOME",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_TARGET_DEVICE",
    ):
        assert env[name] == USER_ENV[name], name
    assert env["PYTHONPATH"] == "/opt/plugins"  # the empty entry (the working directory) is dropped
    assert (env["PYTHONSAFEPATH"], env["HF_HUB_OFFLINE"], env["VLLM_NO_USAGE_STATS"]) == ("1", "1", "1")
