"""Do LMCache's compiled CUDA ops load with the installed torch? Asked in a child process (importing
torch takes seconds, and a broken extension must not take the tool down).

Seen on the lent H200 (torch 2.11.0+cu130): LMCache 0.5.4-0.5.6's ``lmcache.cuda_ops`` fails with
``undefined symbol: _ZN3c1019NotImplementedError...`` (built against a newer torch), and LMCache
then logs one warning and carries on with its pure-torch ops: a study would tune, and a user would
deploy, LMCache's slow path without noticing. 0.5.3's ``lmcache.c_ops`` loads there, and
``import lmcache`` already loads it, as a module whose ``__spec__`` is None: ``find_spec`` raises
ValueError on it, so a module already in ``sys.modules`` counts as loaded.
(benchmarks/gpu/results/round2/lmcache_check.txt)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LmcacheOps", "lmcache_ops"]

# the compiled module is lmcache.c_ops up to 0.5.3 and lmcache.cuda_ops from 0.5.4
_PROBE = r"""
import importlib, importlib.util, sys
try:
    import torch
    tv = torch.__version__
except Exception as exc:
    tv = "(torch not importable: %s)" % (str(exc).splitlines() or [""])[0][:200]
try:
    import lmcache
except Exception as exc:
    print("FAIL lmcache does not import (%s: %s)" % (type(exc).__name__, (str(exc).splitlines() or [""])[0][:300]))
    sys.exit()
v = getattr(lmcache, "__version__", "?")
def present(n):
    if "lmcache." + n in sys.modules:  # imported by lmcache itself (0.5.3: c_ops, whose __spec__ is None)
        return True
    try:
        return importlib.util.find_spec("lmcache." + n) is not None
    except (ImportError, ValueError):
        return False
names = [n for n in ("cuda_ops", "c_ops") if present(n)]
if not names:
    print("FAIL lmcache %s has no compiled ops module (lmcache.cuda_ops or lmcache.c_ops)" % v)
    sys.exit()
for n in names:
    if "lmcache." + n in sys.modules:
        continue  # already loaded: it loads with this torch
    try:
        importlib.import_module("lmcache." + n)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        print("FAIL lmcache %s: lmcache.%s does not load with torch %s (%s: %s)" % (v, n, tv, type(exc).__name__, first))
        sys.exit()
print("OK lmcache %s: lmcache.%s loads with torch %s" % (v, names[0], tv))
"""


@dataclass(frozen=True)
class LmcacheOps:
    loads: bool
    line: str  # what was found, one line

    def warning(self) -> str | None:
        if self.loads:
            return None
        return (
            f"{self.line}: LMCache falls back to its pure-torch ops, slower than its CUDA kernels, and a "
            "study would measure that path (fix: install the LMCache release built for this torch)"
        )


def lmcache_ops(python: str = sys.executable, env: Mapping[str, str] | None = None) -> LmcacheOps:
    """Load LMCache's compiled ops in a child ``python`` and say whether they load."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env=None if env is None else dict(env),
        )
    except subprocess.TimeoutExpired:
        return LmcacheOps(False, "FAIL loading LMCache's ops took over 120 s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("OK ", "FAIL "))]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return LmcacheOps(False, f"FAIL the LMCache probe exited with {proc.returncode} ({tail})")
    ok, _, line = lines[-1].partition(" ")
    return LmcacheOps(ok == "OK", line)
