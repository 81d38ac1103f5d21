"""Fixtures shared by the engine tests of tests/integration (test_engine_faults.py and
test_engine_tenancy.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def trap_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A working directory with ``secrets.py`` and ``json.py`` that leave a marker when imported
    (the test runs from it); (the directory, the markers' folder). A module that uses it imports
    ``json`` and ``secrets`` itself first, so that nothing of the runner's is the trap's."""
    trap, markers = tmp_path / "cwd", tmp_path / "markers"
    trap.mkdir()
    markers.mkdir()
    for name in ("secrets", "json"):
        (trap / f"{name}.py").write_text(
            f"import os\nopen(os.path.join({str(markers)!r}, '{name}-' + str(os.getpid())), 'w').close()\n"
        )
    # The trap works: a Python child that puts the working directory on its path imports it.
    plain_env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    subprocess.run([sys.executable, "-c", "import json"], cwd=trap, env=plain_env, check=True)
    assert [m.name.split("-")[0] for m in markers.iterdir()] == ["json"]
    for m in markers.iterdir():
        m.unlink()
    monkeypatch.chdir(trap)
    yield trap, markers
