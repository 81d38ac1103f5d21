"""A spec's cache_dir puts vLLM's compile and kernel caches in one folder every trial shares."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.engine import LaunchSpec
from autotune.engine._launch import CACHE_ENV_DIRS
from autotune.space import RenderedConfig

NO_ARGS = RenderedConfig(args=())


def test_cache_dir_points_every_cache_into_its_own_subfolder(tmp_path: Path) -> None:
    env = LaunchSpec(model="m", cache_dir=tmp_path / "study" / "cache").process_env(NO_ARGS)
    root = tmp_path / "study" / "cache"
    assert env["VLLM_CACHE_ROOT"] == str(root / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(root / "triton")
    assert all((root / sub).is_dir() for _, sub in CACHE_ENV_DIRS)


def test_two_trials_of_one_spec_share_the_caches(tmp_path: Path) -> None:
    spec = LaunchSpec(model="m", cache_dir=tmp_path)
    first = spec.process_env(RenderedConfig(args=("--max-num-seqs", "8")))
    second = spec.process_env(RenderedConfig(args=("--max-num-seqs", "64")))
    assert {k: first[k] for k, _ in CACHE_ENV_DIRS} == {k: second[k] for k, _ in CACHE_ENV_DIRS}


def test_a_relative_cache_dir_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's processes may change directory; torch makes its own path absolute anyway
    monkeypatch.chdir(tmp_path)
    env = LaunchSpec(model="m", cache_dir=Path("studies/s1/cache")).process_env(NO_ARGS)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path.resolve() / "studies/s1/cache/vllm")


def test_a_cache_path_the_user_set_in_the_spec_wins(tmp_path: Path) -> None:
    mine = str(tmp_path / "my-vllm-cache")
    spec = LaunchSpec(model="m", env={"VLLM_CACHE_ROOT": mine}, cache_dir=tmp_path / "study")
    env = spec.process_env(NO_ARGS)
    assert env["VLLM_CACHE_ROOT"] == mine
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "study" / "triton")
    assert not (tmp_path / "study" / "vllm").exists()  # nothing made that is not used


def test_the_study_cache_replaces_an_inherited_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch writes TORCHINDUCTOR_CACHE_DIR into os.environ whenever it looks its cache up, so an
    # inherited value is not necessarily the user's choice; spec.env is.
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/elsewhere")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_someone")
    env = LaunchSpec(model="m", cache_dir=tmp_path).process_env(NO_ARGS)
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")


def test_without_cache_dir_the_environment_is_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/users/own/cache")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    env = LaunchSpec(model="m").process_env(NO_ARGS)
    assert env["VLLM_CACHE_ROOT"] == "/users/own/cache"
    assert "TRITON_CACHE_DIR" not in env


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or importlib.util.find_spec("triton") is None,
    reason="vLLM or Triton is not installed",
)
def test_the_installed_vllm_torch_and_triton_read_these_variables(tmp_path: Path) -> None:
    env = LaunchSpec(model="m", cache_dir=tmp_path).process_env(NO_ARGS)
    code = (
        "import vllm.envs as e; print(e.VLLM_CACHE_ROOT)\n"
        "from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())\n"
        "from triton import knobs; print(knobs.cache.dir)\n"
    )
    env = {**os.environ, **{name: env[name] for name, _ in CACHE_ENV_DIRS}}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(tmp_path / sub) for _, sub in CACHE_ENV_DIRS]
