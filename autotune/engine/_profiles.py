"""Engine profiles: how CPU KV offload (and anything else a space tunes) reaches one engine.

Each profile renders the same tuned parameters to its engine's flags (see search_spaces/README.md
for the ``render:`` mappings; :func:`autotune.space.apply_profile` resolves them):

- ``cuda-native``: vLLM's own offload. ``--kv-offloading-size GiB`` (vLLM turns it into
  ``OffloadingConnector`` with ``cpu_bytes_to_use``: vllm/config/vllm.py
  ``_post_init_kv_transfer_config``); the connector's other keys (``block_size``,
  ``eviction_policy``) go in ``--kv-transfer-config``, which vLLM merges with the size.
- ``cuda-lmcache``: ``LMCacheConnectorV1`` with ``lmcache.*`` keys in ``--kv-transfer-config``.
  (``--kv-offloading-backend lmcache`` would not do: in vLLM 0.32 it selects
  ``LMCacheMPConnector``, whose pool size belongs to a separate LMCache server.)
- ``ascend``: vllm-ascend's ``CPUOffloadingConnector`` (``cpu_swap_space_gb``,
  ``swap_in_threshold``), its module path read from the installed vllm-ascend. Its pool lives
  in /dev/shm as ``cpu_kv_cache_*`` files.
- ``cpu``: the CPU build has no KV offload.

Detection reads package metadata only (importing vLLM takes seconds).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from autotune.engine._platform import (
    ASCEND_CONNECTOR_MODULES,
    InstalledEngine,
    ascend_connector_module,
    installed_engine,
)
from autotune.errors import ConfigError
from autotune.space import PROFILE_NAMES, SearchSpace, apply_profile, describe_target, load_search_space

__all__ = [
    "ASCEND_CONNECTOR_MODULES",
    "EngineProfile",
    "InstalledEngine",
    "ascend_connector_module",
    "build_profile",
    "default_space_path",
    "detect_profile",
    "installed_engine",
    "preview_profile",
    "select_profile",
    "supported_knobs",
]

_KV_TRANSFER = "--kv-transfer-config"
_KV_SIZE = "--kv-offloading-size"
_NATIVE_ONLY_GPU = (
    "vLLM's native KV offload runs only on CUDA-alike and XPU GPUs (\"CPU Offloading is currently "
    'only supported on CUDA-alike and XPU GPUs", vllm/v1/kv_offload/cpu/spec.py)'
)
_LMCACHE_NOT_SIZE = (
    "with the cuda-lmcache profile the host pool is LMCache's (lmcache.max_local_cpu_size): "
    "--kv-offloading-size would start vLLM's native offload instead, and with --kv-offloading-backend "
    "lmcache vLLM 0.32 ignores the size (LMCacheMPConnector's pool belongs to its LMCache server)"
)
_CPU_BUILD = (
    "CPU KV offload moves KV blocks from GPU to host memory; on the CPU build the KV cache already "
    "lives in host memory, and " + _NATIVE_ONLY_GPU
)


@dataclass(frozen=True)
class EngineProfile:
    """One engine's way of taking the tuned parameters. Satisfies ``autotune.space.EngineProfileLike``."""

    name: str
    platform: str  # a search-space platform: cuda, cpu, ascend
    description: str
    json_bases: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    unsupported_flags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    shm_patterns: tuple[str, ...] = ()  # files its host pool may leave in /dev/shm after a crash
    cpu_hit_sources: tuple[str, ...] = ()  # vllm:prompt_tokens_cached_by_source labels of pool hits
    unavailable: str | None = None  # why its offload cannot run on what is installed
    default_space: str = "cuda.yaml"


def _minor(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m[1]), int(m[2])) if m else None


def _blocked(reason: str | None, *flags: str) -> Mapping[str, str]:
    return MappingProxyType({f: reason for f in flags} if reason else {})


def _gpu_unavailable(installed: InstalledEngine) -> str | None:
    if installed.cpu_build:
        return f"the installed vLLM is the CPU build ({installed.vllm_distribution} {installed.vllm_version})"
    return None


def _cuda_native(installed: InstalledEngine) -> EngineProfile:
    why = _gpu_unavailable(installed)
    return EngineProfile(
        name="cuda-native",
        platform="cuda",
        description="vLLM's native CPU KV offload: --kv-offloading-size with OffloadingConnector",
        json_bases=MappingProxyType(
            {_KV_TRANSFER: {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"}}
        ),
        unsupported_flags=_blocked(why and f"{why}; {_NATIVE_ONLY_GPU}", _KV_SIZE, _KV_TRANSFER),
        shm_patterns=("vllm_offload_*.mmap",),  # vllm/v1/kv_offload/cpu/shared_offload_region.py
        cpu_hit_sources=("host",),
        unavailable=why,
    )


def _cuda_lmcache(installed: InstalledEngine) -> EngineProfile:
    why = _gpu_unavailable(installed)
    if why is None and installed.lmcache_version is None:
        why = "the lmcache package is not installed (fix: pip install lmcache)"
    base: dict[str, Any] = {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.local_cpu": True},
    }
    return EngineProfile(
        name="cuda-lmcache",
        platform="cuda",
        description="LMCache's CPU backend: LMCacheConnectorV1 through --kv-transfer-config",
        json_bases=MappingProxyType({_KV_TRANSFER: base}),
        unsupported_flags=MappingProxyType(
            {_KV_SIZE: _LMCACHE_NOT_SIZE, **({_KV_TRANSFER: why} if why else {})}
        ),
        cpu_hit_sources=("external_unspecified",),  # the connector does not name its tier
        unavailable=why,
    )


def _ascend(installed: InstalledEngine) -> EngineProfile:
    module, version = installed.ascend_connector_module, installed.ascend_version
    why = None
    if version is None:
        why = "vllm-ascend is not installed"
    elif module is None:
        removed = (_minor(version) or (0, 0)) >= (0, 24)
        why = f"vllm-ascend {version} has no CPUOffloadingConnector" + (
            " (removed in vllm-ascend 0.24)"
            if removed
            else f" (looked for {', '.join(ASCEND_CONNECTOR_MODULES)})"
        )
    base = {"kv_connector": "CPUOffloadingConnector", "kv_role": "kv_both"}
    if module is not None:
        base["kv_connector_module_path"] = module
    blocked = {
        _KV_SIZE: f"{_NATIVE_ONLY_GPU}; on Ascend the host pool is CPUOffloadingConnector's cpu_swap_space_gb"
    }
    if why:
        blocked[_KV_TRANSFER] = why
    return EngineProfile(
        name="ascend",
        platform="ascend",
        description="vllm-ascend's CPUOffloadingConnector (host pool in /dev/shm)",
        json_bases=MappingProxyType({_KV_TRANSFER: base}),
        unsupported_flags=MappingProxyType(blocked),
        shm_patterns=("cpu_kv_cache_*",),
        cpu_hit_sources=("external_unspecified",),
        unavailable=why,
    )


def _cpu(installed: InstalledEngine) -> EngineProfile:
    return EngineProfile(
        name="cpu",
        platform="cpu",
        description="the CPU build of vLLM: no KV offload",
        unsupported_flags=_blocked(_CPU_BUILD, _KV_SIZE, _KV_TRANSFER),
        default_space="cpu.yaml",
    )


_BUILDERS = {"cuda-native": _cuda_native, "cuda-lmcache": _cuda_lmcache, "ascend": _ascend, "cpu": _cpu}
assert tuple(sorted(_BUILDERS)) == PROFILE_NAMES, "profile names and the space format disagree"


def build_profile(name: str, installed: InstalledEngine | None = None) -> EngineProfile:
    """The profile ``name`` for what is installed (``installed``, or read now)."""
    if name not in _BUILDERS:
        raise ConfigError(f"--profile: unknown engine profile {name!r} (known: {', '.join(PROFILE_NAMES)})")
    return _BUILDERS[name](installed if installed is not None else installed_engine())


def detect_profile(installed: InstalledEngine | None = None) -> EngineProfile:
    """``cpu`` for the CPU build, ``ascend`` when vllm-ascend is installed, else ``cuda-native``."""
    installed = installed if installed is not None else installed_engine()
    if installed.cpu_build:
        return _cpu(installed)
    if installed.ascend_version is not None:
        return _ascend(installed)
    return _cuda_native(installed)


def select_profile(name: str | None, installed: InstalledEngine | None = None) -> EngineProfile:
    """For ``--profile``: the named profile, which must be usable here, or the detected one.

    A detected profile whose offload cannot run (vllm-ascend 0.24) is returned as it is: its
    offload parameters are then not tuned, with the reason. A named one raises instead.
    """
    if name is None:
        return detect_profile(installed)
    profile = build_profile(name, installed)
    if profile.unavailable is not None:
        raise ConfigError(
            f"--profile {name}: {profile.unavailable} (fix: pick another profile, or omit --profile)"
        )
    return profile


def default_space_path(profile: EngineProfile) -> Path:
    """The shipped search space for ``profile``: ``search_spaces/`` of this project, installed with
    the package as ``autotune.search_spaces`` (pyproject.toml maps the folder there)."""
    from importlib.resources import files

    checkout = Path(__file__).resolve().parents[2] / "search_spaces"  # a checkout, editable install
    if (checkout / profile.default_space).is_file():
        return checkout / profile.default_space
    return Path(str(files("autotune.search_spaces").joinpath(profile.default_space)))  # a wheel


def supported_knobs(profile: EngineProfile, space: SearchSpace | None = None) -> list[tuple[str, str]]:
    """(parameter, how it reaches the engine, or ``unsupported: reason``) for every parameter of
    ``space`` (default: the profile's shipped space) as ``profile`` renders it."""
    space = space if space is not None else load_search_space(default_space_path(profile))
    resolved = apply_profile(space, profile)
    return [(name, describe_target(p)) for name, p in resolved.parameters.items()]


def preview_profile(name: str) -> tuple[EngineProfile, str | None]:
    """For ``--dry-run``: the named profile as it renders on the engine it is meant for, even when
    this machine cannot run it (a GPU profile previewed on a CPU machine). The note says so."""
    installed = installed_engine()
    profile = build_profile(name, installed)
    if profile.unavailable is None:
        return profile, None
    target = dataclasses.replace(
        installed,
        vllm_distribution="vllm",
        vllm_version=(installed.vllm_version or "").partition("+")[0] or None,
        lmcache_version=installed.lmcache_version or "(not installed here)",
        ascend_version=installed.ascend_version or ("0.23" if name == "ascend" else None),
        ascend_connector_module=installed.ascend_connector_module
        or (ASCEND_CONNECTOR_MODULES[0] if name == "ascend" else None),
    )
    note = f"previewing profile {name} as its own engine would take it; here: {profile.unavailable}"
    return build_profile(name, target), note
