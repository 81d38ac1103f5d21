"""The wheel ships every package of the tree: pyproject.toml lists its packages by name, so a new
folder of ``autotune/`` that is not listed would install without it (``import autotune.usecases``
failing only outside the checkout, in .ci/wheel_check.sh)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "autotune").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert folders - listed == set(), (
        f"add to [tool.setuptools] packages in pyproject.toml: {folders - listed}"
    )
