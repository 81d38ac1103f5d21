"""A configuration crosses the engine seam typed, in one direction (issue 46).

The study hands the engine an :class:`~autotune.space.EngineConfig`; only ``engine/`` renders it to
argv and reads its memory sizing. Above ``engine/`` nothing renders values to flags, builds the
engine's words, or reads a sizing out of argv; the memory guard takes the engine's ``EngineSizing``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import autotune
from autotune.engine import VLLM, LaunchSpec
from autotune.space import EngineConfig, load_search_space
from autotune.trial import MemoryGuard
from tests.conftest import REPO

PACKAGE = Path(autotune.__file__).parent
# What turns a configuration into the engine's words, or its words back into a sizing: engine/ only.
ENGINE_ONLY = {"render_values", "render_config", "sizing_from_argv", "RenderedConfig"}


def _above_engine() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "engine" not in p.relative_to(PACKAGE).parts[:1]]


def _uses(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line name`` for each call of a renderer or sizing reader, or construction of words."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ENGINE_ONLY:
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def test_nothing_above_engine_renders_a_configuration_or_reads_a_sizing_from_argv() -> None:
    found = [hit for path in _above_engine() for hit in _uses(path)]
    assert found == [], "above engine/: " + ", ".join(found)


def test_the_check_sees_a_call_it_must_refuse(tmp_path: Path) -> None:
    """The test above can fail: a module that renders values itself is named, with its line."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from x import render_values\nargs = render_values(space, values).args\ns = e.sizing_from_argv(a)\n"
    )
    assert sorted(_uses(bad, tmp_path)) == ["bad.py:2 render_values", "bad.py:3 sizing_from_argv"]


@pytest.fixture
def space():  # type: ignore[no-untyped-def]
    return load_search_space(REPO / "search_spaces" / "cuda.yaml")


def test_the_pool_goes_from_the_study_to_the_launch_and_the_sizing_by_its_role(space) -> None:  # type: ignore[no-untyped-def]
    """The host pool the study chose, by its role, reaches the command the engine launches and the
    sizing the memory guard reads, both made by the engine from the same typed configuration."""
    pool = space.roles.kv_pool
    assert pool is not None
    config = EngineConfig.chosen(space, {pool: 16})
    assert config.value("kv_pool") == 16
    spec = LaunchSpec(model="m")
    launched = VLLM.argv(spec, config, 8000)
    assert launched[launched.index("--kv-offloading-size") + 1] == "16"
    assert VLLM.sizing(spec, config, "cuda").offload_bytes == 16 * 2**30
    assert VLLM.sizing(spec, EngineConfig(), "cuda").offload_bytes == 0


def test_a_group_share_is_a_role_value_the_engine_renders(space) -> None:  # type: ignore[no-untyped-def]
    """A group model's share of the KV budget is set by role, with no parameter and no flag above
    engine/; the engine spells it and sizes it."""
    config = EngineConfig.chosen(space, {}).with_role("kv_bytes", 96 * 2**20)
    assert config.value("kv_bytes") == 96 * 2**20
    sizing = VLLM.sizing(LaunchSpec(model="m"), config, "cpu")
    assert sizing.kv_cache_memory_bytes == 96 * 2**20


def test_a_configuration_is_immutable(space) -> None:  # type: ignore[no-untyped-def]
    config = EngineConfig.chosen(space, {space.roles.block_size: 64})
    with pytest.raises(TypeError):
        config.values[space.roles.block_size] = 128  # type: ignore[index]
    with pytest.raises(AttributeError):
        config.flags = ("--x",)  # type: ignore[misc]


def test_the_memory_guard_reads_the_engines_sizing_not_argv() -> None:
    """Its check takes an ``EngineSizing`` (typed), not a command line to parse."""
    import inspect

    params = inspect.signature(MemoryGuard.check).parameters
    assert "sizing" in params and "engine_argv" not in params
