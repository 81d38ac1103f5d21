from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import render_values
from autotune.space import Condition, SearchSpace, load_search_space

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"


def _space(**params: dict[str, Any]) -> SearchSpace:
    return SearchSpace.model_validate({"name": "t", "platform": "cuda", "parameters": params})


def test_flag_value_follows_the_flag() -> None:
    space = _space(bs={"type": "categorical", "choices": [16, 32], "flag": "--block-size"})
    assert render_values(space, {"bs": 32}).args == ("--block-size", "32")


def test_bool_renders_the_flag_or_its_no_form() -> None:
    space = _space(pc={"type": "bool", "flag": "--enable-prefix-caching"})
    assert render_values(space, {"pc": True}).args == ("--enable-prefix-caching",)
    assert render_values(space, {"pc": False}).args == ("--no-enable-prefix-caching",)


def test_env_parameter_goes_to_the_environment_not_argv() -> None:
    space = _space(kv={"type": "int", "low": 1, "high": 8, "env": "VLLM_CPU_KVCACHE_SPACE"})
    rendered = render_values(space, {"kv": 4})
    assert rendered.args == ()
    assert rendered.env == {"VLLM_CPU_KVCACHE_SPACE": "4"}


def test_format_string_shapes_the_value() -> None:
    rendered = render_values(load_search_space(SPACES / "cpu.yaml"), {"kv_cache_memory_bytes": 64})
    assert rendered.args == ("--kv-cache-memory-bytes", "64M")


def test_float_is_rendered_without_binary_noise() -> None:
    space = _space(
        g={"type": "float", "low": 0.5, "high": 0.95, "step": 0.05, "flag": "--gpu-memory-utilization"}
    )
    assert render_values(space, {"g": 0.1 + 0.2 + 0.6}).args == ("--gpu-memory-utilization", "0.9")


def test_off_value_renders_nothing() -> None:
    space = load_search_space(SPACES / "cuda.yaml")
    assert "--kv-offloading-size" not in render_values(space, {"cpu_swap_space_gb": 0}).args
    assert render_values(space, {"cpu_swap_space_gb": 16}).args == ("--kv-offloading-size", "16")


def test_fields_of_one_json_flag_are_merged_into_one_flag_on_top_of_json_base() -> None:
    base = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}
    space = _space(
        size={
            "type": "int",
            "low": 1,
            "high": 64,
            "json_flag": "--kv-transfer-config",
            "json_path": "kv_connector_extra_config.cpu_bytes_to_use",
            "json_base": base,
        },
        policy={
            "type": "categorical",
            "choices": ["lru", "arc"],
            "json_flag": "--kv-transfer-config",
            "json_path": "kv_connector_extra_config.eviction_policy",
        },
    )
    rendered = render_values(space, {"size": 8, "policy": "arc"})
    assert rendered.args.count("--kv-transfer-config") == 1
    flag_at = rendered.args.index("--kv-transfer-config")
    assert json.loads(rendered.args[flag_at + 1]) == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 8, "eviction_policy": "arc"},
    }
    # json_base is a template: rendering must not write into the space's own copy.
    assert space.parameters["size"].json_base == base


def test_json_field_keeps_its_type_unless_formatted() -> None:
    space = _space(
        t={"type": "int", "low": 0, "high": 9, "json_flag": "--c", "json_path": "a.t"},
        s={"type": "int", "low": 0, "high": 9, "json_flag": "--c", "json_path": "a.s", "format": "{}G"},
    )
    args = render_values(space, {"t": 3, "s": 2}).args
    assert json.loads(args[1]) == {"a": {"t": 3, "s": "2G"}}


def test_absent_and_unsupported_parameters_render_nothing() -> None:
    space = load_search_space(SPACES / "cpu.yaml")
    # cpu_swap_space_gb is unsupported on cpu: even if a value shows up, it never reaches vLLM.
    rendered = render_values(space, {"block_size": 64, "cpu_swap_space_gb": 2})
    assert rendered.args == ("--block-size", "64")
    assert rendered.flag_names() == {"--block-size"}


@pytest.mark.parametrize(
    ("condition", "value", "holds"),
    [
        ({"equals": 0}, 0, True),
        ({"equals": 0}, 8, False),
        ({"not_equals": 0}, 8, True),
        ({"not_equals": 0}, 0, False),
        ({"greater_than": 0}, 8, True),
        ({"greater_than": 0}, 0, False),
        ({"greater_than": 0}, "lru", False),
        ({"one_of": ["lru", "arc"]}, "arc", True),
        ({"one_of": ["lru", "arc"]}, "fifo", False),
        ({"greater_than": 0, "not_equals": 64}, 64, False),
        ({"equals": 0}, None, False),  # the parameter it depends on was not sampled
    ],
)
def test_condition_holds(condition: dict[str, Any], value: Any, holds: bool) -> None:
    assert Condition(param="x", **condition).holds(value) is holds
