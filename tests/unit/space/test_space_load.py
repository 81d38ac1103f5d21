from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.errors import ConfigError, SearchSpaceError
from autotune.space import SearchSpace, load_search_space

SPACES = Path(__file__).resolve().parents[3] / "search_spaces"

# A valid space; each malformed case below changes one thing in it. An error inside a
# parameter points at the first line of its body (line 5 for max_num_seqs).
VALID = """\
name: test
platform: cpu
parameters:
  max_num_seqs:
    type: int
    low: 1
    high: 256
    flag: --max-num-seqs
  block_size:
    type: categorical
    choices: [32, 64]
    flag: --block-size
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(SearchSpaceError) as info:
        load_search_space(path)
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert message.startswith(str(path)), message
    return message


def _line(message: str, path: Path) -> int | None:
    m = re.match(re.escape(str(path)) + r":(\d+):", message)
    return int(m[1]) if m else None


def test_the_valid_base_space_loads(tmp_path: Path) -> None:
    space = load_search_space(_write(tmp_path, VALID))
    assert list(space.tunable) == ["max_num_seqs", "block_size"]


def test_shipped_cpu_space_loads_and_explains_why_offload_is_not_tuned() -> None:
    space = load_search_space(SPACES / "cpu.yaml")
    assert space.platform == "cpu"
    assert "cpu_swap_space_gb" not in space.tunable
    reason = space.unsupported["cpu_swap_space_gb"]
    assert "CPU Offloading is currently only supported" in reason
    assert "swap_in_threshold" in space.unsupported
    assert "gpu_memory_utilization" in space.unsupported
    assert {"kv_cache_memory_bytes", "max_num_batched_tokens", "block_size", "enable_prefix_caching"} <= set(
        space.tunable
    )


def test_shipped_cpu_space_only_offers_block_sizes_cpu_attention_accepts() -> None:
    # vLLM's CPU attention fails with "No common block size for 16": multiples of 32 only.
    choices = load_search_space(SPACES / "cpu.yaml").parameters["block_size"].choices
    assert choices and all(int(c) % 32 == 0 for c in choices)


def test_shipped_cuda_space_loads_with_offload_tunable_and_conditional_threshold_explained() -> None:
    space = load_search_space(SPACES / "cuda.yaml")
    assert space.platform == "cuda"
    assert "cpu_swap_space_gb" in space.tunable
    assert space.tunable["cpu_swap_space_gb"].off_value == 0
    assert set(space.unsupported) == {"swap_in_threshold", "kv_cache_dtype"}  # kv_cache_dtype: opt-in
    assert space.unsupported["swap_in_threshold"].strip()


@pytest.mark.parametrize(
    ("text", "line", "needles"),
    [
        pytest.param(
            VALID.replace("choices: [32, 64]", "choises: [32, 64]"),
            11,
            ["parameters.block_size.choises", "spelling"],
            id="unknown-key",
        ),
        pytest.param(
            VALID.replace("    low: 1\n", ""),
            5,
            ["parameters.max_num_seqs", "'low' and 'high'"],
            id="missing-low",
        ),
        pytest.param(
            VALID.replace("    high: 256\n", ""),
            5,
            ["parameters.max_num_seqs", "'low' and 'high'"],
            id="missing-high",
        ),
        pytest.param(
            VALID.replace("low: 1", "low: 512"),
            5,
            ["parameters.max_num_seqs", "low (512", "high (256"],
            id="low-above-high",
        ),
        pytest.param(
            VALID.replace("low: 1", "low: 0\n    log: true"),
            5,
            ["parameters.max_num_seqs", "log", "low > 0"],
            id="log-with-zero-low",
        ),
        pytest.param(
            VALID.replace("high: 256", "high: lots"),
            7,
            ["parameters.max_num_seqs.high", "'lots'"],
            id="wrong-type",
        ),
        pytest.param(
            VALID.replace("type: int", "type: integer"),
            5,
            ["parameters.max_num_seqs.type", "'integer'"],
            id="unknown-type-name",
        ),
        pytest.param(
            VALID.replace("platform: cpu", "platform: tpu"),
            2,
            ["platform", "'tpu'"],
            id="unknown-platform",
        ),
        pytest.param(
            VALID + "    condition: {param: max_num_seqs, equal: 1}\n",
            13,
            ["parameters.block_size.condition.equal"],
            id="unknown-condition-key",
        ),
        pytest.param(
            VALID.replace("choices: [32, 64]", "choices: [32, 64"),
            12,
            ["invalid YAML"],
            id="yaml-syntax",
        ),
    ],
)
def test_malformed_space_gives_one_line_naming_file_line_and_key(
    tmp_path: Path, text: str, line: int, needles: list[str]
) -> None:
    message = _error(tmp_path, text)
    assert _line(message, tmp_path / "space.yaml") == line, message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""], ids=["list", "scalar", "empty"])
def test_top_level_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str) -> None:
    message = _error(tmp_path, text)
    assert "mapping" in message


def test_missing_file_is_a_search_space_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SearchSpaceError, match=r"nope\.yaml"):
        load_search_space(tmp_path / "nope.yaml")


def test_search_space_error_is_a_config_error_so_the_cli_exits_2() -> None:
    assert issubclass(SearchSpaceError, ConfigError)
    assert SearchSpaceError("x").exit_code == 2


def test_condition_on_unknown_parameter_names_the_key_path(tmp_path: Path) -> None:
    message = _error(tmp_path, VALID + "    condition: {param: nope, equals: 1}\n")
    assert "parameters.block_size.condition.param" in message
    assert "'nope'" in message


def test_condition_on_unknown_parameter_names_the_condition_line(tmp_path: Path) -> None:
    message = _error(tmp_path, VALID + "    condition: {param: nope, equals: 1}\n")
    assert _line(message, tmp_path / "space.yaml") == 13, message


def test_condition_must_refer_to_an_earlier_parameter(tmp_path: Path) -> None:
    text = VALID.replace(
        "    flag: --max-num-seqs\n",
        "    flag: --max-num-seqs\n    condition: {param: block_size, equals: 32}\n",
    )
    message = _error(tmp_path, text)
    assert "must be declared before" in message


def test_a_parameter_declared_twice_is_refused(tmp_path: Path) -> None:
    text = VALID + "  max_num_seqs:\n    type: bool\n    flag: --enforce-eager\n"
    with pytest.raises(SearchSpaceError, match="max_num_seqs"):
        load_search_space(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ({"type": "int", "low": 1, "high": 4}, "exactly one of"),
        ({"type": "int", "low": 1, "high": 4, "flag": "--a", "env": "A"}, "exactly one of"),
        ({"type": "int", "low": 1, "high": 4, "json_flag": "--a"}, "go together"),
        ({"type": "int", "low": 1, "high": 4, "flag": "max-num-seqs"}, "must start with '--'"),
        ({"type": "int", "low": 1, "high": 4, "log": True, "step": 2, "flag": "--a"}, "cannot be combined"),
        ({"type": "int", "low": 1.5, "high": 4, "flag": "--a"}, "integer"),
        ({"type": "categorical", "choices": [], "flag": "--a"}, "non-empty"),
        ({"type": "categorical", "choices": [1, 1], "flag": "--a"}, "duplicates"),
        ({"type": "bool", "low": 0, "high": 1, "flag": "--a"}, "no low/high"),
    ],
)
def test_parameter_rules(param: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchSpace.model_validate({"name": "t", "platform": "cuda", "parameters": {"a": param}})
