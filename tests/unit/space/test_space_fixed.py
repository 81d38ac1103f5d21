"""A parameter the user's fixed flags set leaves the search, however the flag is spelled; a JSON
field of ``--kv-transfer-config`` (or a ``fixed_by`` spelling) fixes its parameter; conditions follow."""

from __future__ import annotations

import json

from autotune.engine import InstalledEngine, build_profile, render_values
from autotune.space import (
    SearchSpace,
    apply_profile,
    fix_space,
    flag_pairs,
    load_search_space,
    merge_flag_items,
)
from tests.conftest import REPO

FULL = InstalledEngine("vllm", "0.33.0", "0.23.0", None, "0.3.9")


def _cuda(profile: str, *fixed: str) -> SearchSpace:
    space = apply_profile(
        load_search_space(REPO / "search_spaces" / "cuda.yaml"), build_profile(profile, FULL)
    )
    return fix_space(space, flag_pairs(list(fixed)))


def test_every_spelling_of_a_flag_fixes_its_parameter() -> None:
    for fixed in (["--block-size=32"], ["--block_size", "32"], ["--block-size", "32"]):
        space = _cuda("cuda-native", *fixed)
        assert "block_size" not in space.tunable and space.fixed_values["block_size"] == 32
    space = _cuda("cuda-native", "--no-enable-prefix-caching")
    assert space.fixed["enable_prefix_caching"] == "fixed by you (--no-enable-prefix-caching)"
    assert space.fixed_values["enable_prefix_caching"] is False
    assert "--no-enable-prefix-caching" not in render_values(space, {"enable_prefix_caching": True}).args


def test_a_fixed_pool_keeps_its_knobs_unconditional_and_a_zero_pool_turns_them_off() -> None:
    on = _cuda("cuda-native", "--kv-offloading-size", "16")
    assert on.tunable["offload_block_size"].condition is None
    off = _cuda("cuda-native", "--kv-offloading-size=0")
    assert {"offload_block_size", "offload_eviction_policy"} <= set(off.fixed)
    assert not {"offload_block_size", "offload_eviction_policy"} & set(off.tunable)


def test_json_fields_of_a_fixed_transfer_config_fix_their_parameters() -> None:
    native = json.dumps(
        {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 8 * 2**30, "block_size": 256},
        }
    )
    space = _cuda("cuda-native", "--kv-transfer-config", native)
    assert space.fixed_values["cpu_swap_space_gb"] == 8.0  # bytes, read in the parameter's GiB
    assert "not one of the space's choices" not in space.fixed["cpu_swap_space_gb"]
    assert space.fixed_values["offload_block_size"] == 256
    assert "offload_eviction_policy" in space.tunable  # the pool is on: its policy is still searched
    lmcache = json.dumps({"kv_connector_extra_config": {"lmcache.max_local_cpu_size": 5}})
    space = _cuda("cuda-lmcache", "--kv-transfer-config", lmcache)
    assert space.fixed["cpu_swap_space_gb"].startswith("fixed by you (--kv-transfer-config ")
    assert "outside" not in space.fixed["cpu_swap_space_gb"] and space.fixed_values["cpu_swap_space_gb"] == 5
    assert (
        "not one of the space's choices [0, 8, 16, 32, 64]"
        in _cuda("cuda-native", "--kv-offloading-size=5").fixed["cpu_swap_space_gb"]
    )


def test_flags_given_again_replace_only_that_flags_value() -> None:
    base = ["--enforce-eager", "--max-model-len=8192", "--block-size", "64", "--enable-prefix-caching"]
    added = ["--dtype=float32", "--max_model_len 4096", "--no-enable-prefix-caching"]
    assert merge_flag_items(base, added) == (
        "--enforce-eager",
        "--max_model_len 4096",
        "--block-size",
        "64",
        "--no-enable-prefix-caching",
        "--dtype=float32",
    )
    assert merge_flag_items(["--a 1 --b"], ["--b=2"]) == ("--a=1", "--b=2")
