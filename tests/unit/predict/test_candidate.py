"""A space's values become the model's candidate by their roles; what a configuration leaves out is
the calibrated engine's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.predict import EngineDefaults, candidate_of
from autotune.space import load_search_space

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = EngineDefaults(
    kv_tokens=2560, kv_bytes_per_token=8192, block_size=128, batched_tokens=2048, max_seqs=128
)


def test_values_by_role_and_defaults_for_the_rest() -> None:
    space = load_search_space(REPO / "search_spaces" / "cpu.yaml")

    c = candidate_of(
        space, {"kv_cache_memory_bytes": 64, "block_size": 32, "enable_prefix_caching": False}, DEFAULTS
    )

    assert c.gpu_kv_tokens == 64 * 2**20 // 8192  # "64M" as the flag takes it
    assert (c.block_size, c.caching, c.pool_tokens) == (32, False, 0)
    assert (c.batched_tokens, c.max_seqs) == (2048, 128)  # not set: the engine's defaults
    assert "kv_cache_memory_bytes=64M" in c.label
    assert candidate_of(space, {}, DEFAULTS).gpu_kv_tokens == 2560


def test_a_host_pool_in_gib_becomes_tokens(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: pool\nplatform: cuda\nparameters:\n"
        "  pool:\n    role: kv_pool\n    type: categorical\n    choices: [0, 2]\n    flag: --kv-offloading-size\n"
    )
    space = load_search_space(path)

    assert candidate_of(space, {"pool": 2}, DEFAULTS).pool_tokens == 2 * 2**30 // 8192


def test_a_size_that_is_not_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(
        "name: kv\nplatform: cpu\nparameters:\n"
        "  kv:\n    role: kv_bytes\n    type: categorical\n    choices: ['lots']\n    flag: --kv-cache-memory-bytes\n"
    )

    with pytest.raises(ConfigError, match=r"kv: 'lots' is not a size \(fix:"):
        candidate_of(load_search_space(path), {"kv": "lots"}, DEFAULTS)
