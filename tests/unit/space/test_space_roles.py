"""Parameters by role: a space says what each parameter is, and a renamed parameter keeps its role."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from autotune.errors import SearchSpaceError
from autotune.space import ROLES, RoleNames, load_search_space, measured_bytes

REPO = Path(__file__).resolve().parents[3]


def _load(tmp_path: Path, text: str) -> object:
    (tmp_path / "s.yaml").write_text(text)
    return load_search_space(tmp_path / "s.yaml")


def test_an_unknown_role_is_one_line_naming_the_file_line_key_value_and_fix(tmp_path: Path) -> None:
    text = (
        "name: s\nplatform: cuda\nparameters:\n  pool:\n    role: host_pool\n    type: bool\n    flag: --x\n"
    )
    with pytest.raises(SearchSpaceError) as err:
        _load(tmp_path, text)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path / 's.yaml'}:5: parameters.pool.role: ")
    assert "'host_pool'" in msg and "'kv_pool'" in msg and "(use one of the allowed values)" in msg


def test_a_role_is_given_to_one_parameter_only(tmp_path: Path) -> None:
    text = (
        "name: s\nplatform: cuda\nparameters:\n"
        "  a: {role: kv_pool, type: categorical, choices: [0, 8], flag: --kv-offloading-size}\n"
        "  b: {role: kv_pool, type: categorical, choices: [0, 8], flag: --y}\n"
    )
    with pytest.raises(
        SearchSpaceError,
        match=r"s.yaml:5: parameters.b.role: role 'kv_pool' is already "
        r"parameter 'a''s \(fix: .*another role, or none\)",
    ):
        _load(tmp_path, text)


def test_a_space_written_before_roles_reads_its_parameters_by_their_old_names(tmp_path: Path) -> None:
    text = (
        "name: s\nplatform: cuda\nparameters:\n"
        "  cpu_swap_space_gb: {type: categorical, choices: [0, 8], flag: --kv-offloading-size}\n"
        "  block_size: {type: categorical, choices: [16, 32], flag: --block-size}\n"
        "  mine: {role: block_size, type: categorical, choices: [16], flag: --z}\n"
    )
    space = _load(tmp_path, text)
    assert space.roles == RoleNames(kv_pool="cpu_swap_space_gb", block_size="mine")  # given wins
    assert RoleNames.guessed(["cpu_swap_space_gb", "x"]) == RoleNames(kv_pool="cpu_swap_space_gb")


def test_every_bundled_space_names_its_roles_and_roles_do_not_change_a_studys_fingerprint(
    tmp_path: Path,
) -> None:
    assert tuple(f.name for f in fields(RoleNames)) == ROLES
    bundled = sorted((REPO / "search_spaces").glob("*.yaml")) + sorted(
        (REPO / "benchmarks").rglob("*space*.yaml")
    )
    for path in bundled:
        space = load_search_space(path)
        text = path.read_text()
        for name, p in space.parameters.items():
            if p.role is not None:
                assert f"  {name}:\n    role: {p.role}\n" in text, (path, name)  # written, not guessed
    cpu = (REPO / "search_spaces" / "cpu.yaml").read_text()
    (tmp_path / "old.yaml").write_text("".join(ln for ln in cpu.splitlines(True) if "role:" not in ln))
    assert measured_bytes(REPO / "search_spaces" / "cpu.yaml") == (tmp_path / "old.yaml").read_bytes()
