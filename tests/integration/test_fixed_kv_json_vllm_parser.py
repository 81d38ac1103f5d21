"""A fixed field of ``--kv-transfer-config`` is not tuned, and the tuned fields join the user's object:
the command, as the study would launch it, read by the installed vLLM's own parser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from autotune.engine import InstalledEngine, LaunchSpec, build_profile, render_values
from autotune.engine._argcheck import VllmArgChecker
from autotune.engine._launch import CPU_LAUNCHER, build_argv, parse_engine_args
from autotune.space import SearchSpace, apply_profile, fix_space, load_search_space
from tests.conftest import REPO
from tests.integration.test_profiles_vllm_parser import _kv_transfer

pytestmark = pytest.mark.vllm(alongside=True)

FULL = InstalledEngine("vllm", "0.33.0", "0.23.0", None, "0.3.9")
GiB = 1 << 30


@pytest.fixture(scope="module")
def checker() -> Iterator[VllmArgChecker]:
    with VllmArgChecker() as c:
        yield c


def _launched(profile: str, fixed: list[str], values: dict[str, Any]) -> tuple[SearchSpace, dict[str, Any]]:
    """The space less what ``fixed`` sets, and vLLM's parse of the command of ``values`` (tunable only)."""
    pairs = parse_engine_args(fixed)
    space = apply_profile(
        load_search_space(REPO / "search_spaces" / "cuda.yaml"), build_profile(profile, FULL)
    )
    space = fix_space(space, pairs)
    rendered = render_values(space, {k: v for k, v in values.items() if k in space.tunable})
    argv = build_argv(
        LaunchSpec(model="tiny-model-not-loaded", launcher=CPU_LAUNCHER, fixed_args=pairs), rendered, 0
    )
    return space, argv[len(CPU_LAUNCHER) :]


def _parsed(checker: VllmArgChecker, argv: list[str]) -> dict[str, Any]:
    check = checker.check(argv)
    assert check.ok, f"vLLM {checker.version} refuses {argv}: {check.error}"
    return check.args


def test_a_native_pool_fixed_in_the_transfer_config_is_kept_and_the_policy_tuned_beside_it(
    checker: VllmArgChecker,
) -> None:
    mine = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 8 * GiB, "block_size": 256},
    }
    values = {"cpu_swap_space_gb": 32, "offload_block_size": 64, "offload_eviction_policy": "arc"}
    space, argv = _launched("cuda-native", [f"--kv-transfer-config={json.dumps(mine)}"], values)
    assert {"cpu_swap_space_gb", "offload_block_size"} <= set(space.fixed)
    assert argv.count("--kv-transfer-config") == 1 and "--kv-offloading-size" not in argv
    args = _parsed(checker, argv)
    assert args["kv_offloading_size"] is None  # vLLM's --kv-offloading-size would override the user's pool
    config = _kv_transfer(args["kv_transfer_config"])
    assert config is not None
    assert (config["kv_connector"], config["kv_role"]) == ("OffloadingConnector", "kv_both")
    assert config["kv_connector_extra_config"] == {
        "cpu_bytes_to_use": 8 * GiB,
        "block_size": 256,
        "eviction_policy": "arc",
    }


def test_a_fixed_lmcache_pool_is_kept_and_the_chunk_size_tuned_into_the_same_object(
    checker: VllmArgChecker,
) -> None:
    mine = {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.local_cpu": True, "lmcache.max_local_cpu_size": 5},
    }
    values = {"cpu_swap_space_gb": 32, "offload_block_size": 512}
    space, argv = _launched("cuda-lmcache", ["--kv-transfer-config", json.dumps(mine)], values)
    assert "cpu_swap_space_gb" in space.fixed and "offload_block_size" in space.tunable
    config = _kv_transfer(_parsed(checker, argv)["kv_transfer_config"])
    assert config is not None and config["kv_connector"] == "LMCacheConnectorV1"
    assert config["kv_connector_extra_config"] == {
        "lmcache.local_cpu": True,
        "lmcache.max_local_cpu_size": 5,
        "lmcache.chunk_size": 512,
    }
