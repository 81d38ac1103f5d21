"""Opt-in parameters (``opt_in:``): listed, not tuned, until the user enables them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import render_values
from autotune.errors import SearchSpaceError
from autotune.space import load_search_space
from tests.conftest import REPO

SPACE = """
name: s
platform: cuda
parameters:
  block_size: {type: categorical, choices: [16, 32], flag: --block-size}
  kv_cache_dtype:
    type: categorical
    choices: [auto, fp8]
    flag: --kv-cache-dtype
    opt_in: fp8 KV changes numerics
"""


def _space(tmp_path: Path, text: str = SPACE) -> Path:
    (tmp_path / "s.yaml").write_text(text)
    return tmp_path / "s.yaml"


def test_an_opt_in_parameter_is_listed_with_its_reason_and_not_tuned_until_enabled(tmp_path: Path) -> None:
    off = load_search_space(_space(tmp_path))
    assert list(off.tunable) == ["block_size"]
    assert off.unsupported == {"kv_cache_dtype": "opt-in, off unless enabled (fp8 KV changes numerics)"}
    assert off.numerics_notes == {}
    on = load_search_space(_space(tmp_path), opt_in=["kv_cache_dtype"])
    assert list(on.tunable) == ["block_size", "kv_cache_dtype"] and on.unsupported == {}
    assert on.numerics_notes == {"kv_cache_dtype": "fp8 KV changes numerics"}
    assert render_values(on, {"kv_cache_dtype": "fp8"}).args == ("--kv-cache-dtype", "fp8")
    assert on != off  # a study records which space it tuned: enabling changes it


def test_enabling_an_unknown_or_ordinary_parameter_names_the_file_the_value_and_the_fix(
    tmp_path: Path,
) -> None:
    path = _space(tmp_path)
    with pytest.raises(SearchSpaceError) as unknown:
        load_search_space(path, opt_in=["kv_dtype"])
    assert str(unknown.value) == (
        f"{path}: --opt-in: opt-in 'kv_dtype' is not a parameter of space 's' (fix: use one of: kv_cache_dtype)"
    )
    with pytest.raises(SearchSpaceError, match=r"'block_size' is not an opt-in parameter .*kv_cache_dtype"):
        load_search_space(path, opt_in=["block_size"])


def test_opted_in_without_an_opt_in_reason_is_refused_at_its_line(tmp_path: Path) -> None:
    text = SPACE.replace("{type: categorical, choices: [16, 32], flag: --block-size}",
                         "{type: categorical, choices: [16, 32], flag: --block-size, opted_in: true}")  # fmt: skip
    with pytest.raises(SearchSpaceError, match=r"s.yaml:5: parameters.block_size: 'opted_in' enables"):
        load_search_space(_space(tmp_path, text))


def test_the_shipped_spaces_offer_max_num_seqs_and_fp8_kv_only_as_an_opt_in() -> None:
    cuda = load_search_space(REPO / "search_spaces" / "cuda.yaml")
    cpu = load_search_space(REPO / "search_spaces" / "cpu.yaml")
    assert "kv_cache_dtype" not in cuda.tunable and "changes numerics" in cuda.unsupported["kv_cache_dtype"]
    for space in (cuda, cpu):
        seqs, batched = space.tunable["max_num_seqs"], space.tunable["max_num_batched_tokens"]
        # vLLM refuses max_num_batched_tokens < max_num_seqs: every pair of choices must start
        assert max(map(float, seqs.choices or ())) <= min(map(float, batched.choices or ()))
        assert seqs.default in (seqs.choices or ())
