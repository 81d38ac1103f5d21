"""LMCache's compiled ops are loaded in a child process: a build for another torch (seen on the
H200: LMCache 0.5.6's cuda_ops against torch 2.11) is named with its error, not silently measured."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from autotune.engine import lmcache_ops


def _fake_lmcache(root: Path, version: str, module: str, body: str) -> dict[str, str]:
    pkg = root / "lmcache"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (pkg / f"{module}.py").write_text(body)
    return {**os.environ, "PYTHONPATH": str(root)}


def test_ops_built_for_another_torch_are_named_with_their_error(tmp_path: Path) -> None:
    env = _fake_lmcache(
        tmp_path,
        "0.5.6",
        "cuda_ops",
        "raise ImportError('cuda_ops.so: undefined symbol: _ZN3c1019NotImplementedErrorC1E')\n",
    )
    ops = lmcache_ops(sys.executable, env)
    assert not ops.loads
    assert ops.line.startswith("lmcache 0.5.6: lmcache.cuda_ops does not load with torch ")
    assert "ImportError: cuda_ops.so: undefined symbol" in ops.line
    warning = ops.warning()
    assert warning is not None and "falls back to its pure-torch ops" in warning and "(fix: " in warning


def test_ops_that_load_are_said_so(tmp_path: Path) -> None:
    ops = lmcache_ops(sys.executable, _fake_lmcache(tmp_path, "0.5.3", "c_ops", "X = 1\n"))
    assert ops.loads and ops.line.startswith("lmcache 0.5.3: lmcache.c_ops loads with torch ")
    assert ops.warning() is None


def test_no_lmcache_at_all_is_a_failure_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    ops = lmcache_ops(sys.executable, env)
    if ops.loads:  # a real LMCache on this machine: nothing to assert about its absence
        return
    assert ops.line.startswith("lmcache does not import (ModuleNotFoundError")


def test_compiled_ops_the_package_already_imported_are_found(tmp_path: Path) -> None:
    """LMCache 0.5.3 on the H200: ``import lmcache`` loads ``lmcache.c_ops``, an extension module
    whose ``__spec__`` is None, so ``importlib.util.find_spec("lmcache.c_ops")`` raises ValueError."""
    env = _fake_lmcache(tmp_path, "0.5.3", "unused", "")
    init = tmp_path / "lmcache" / "__init__.py"
    init.write_text(
        "import sys, types\n"
        "__version__ = '0.5.3'\n"
        "c_ops = types.ModuleType('lmcache.c_ops')  # as a compiled extension registers it: no spec\n"
        "c_ops.multi_layer_kv_transfer = lambda *a: None\n"
        "sys.modules['lmcache.c_ops'] = c_ops\n"
    )
    ops = lmcache_ops(sys.executable, env)
    assert ops.loads, ops.line
    assert ops.line.startswith("lmcache 0.5.3: lmcache.c_ops loads with torch ")
