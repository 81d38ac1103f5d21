"""Launch, watch and stop the engine (vLLM): subprocesses, ports, logs, flags. Never imports optuna.

:class:`Engine` is the seam the rest of the tool uses; :data:`VLLM` implements it.
"""

from __future__ import annotations

from autotune.engine._argcheck import ArgCheck, VllmArgChecker
from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER, LaunchSpec, build_argv, parse_engine_args
from autotune.engine._logscan import FailureClass, KvCapacity, classify_failure, parse_kv_capacity
from autotune.engine._platform import Build, default_launcher, installed_build, installed_engine
from autotune.engine._process import EngineProcess, free_port, port_is_free
from autotune.engine._profiles import (
    EngineProfile,
    InstalledEngine,
    build_profile,
    default_space_path,
    detect_profile,
    preview_profile,
    select_profile,
    supported_knobs,
)
from autotune.engine._reaper import install_signal_handlers, live_count, stop_all
from autotune.engine._seam import ArgChecker, Engine
from autotune.engine._shm import CleanReport, clean_stale_shm
from autotune.engine._sizing import EngineSizing, parse_size, sizing_from_argv
from autotune.engine._vllm import VLLM, VllmEngine

__all__ = [
    "CPU_LAUNCHER",
    "GPU_LAUNCHER",
    "VLLM",
    "ArgCheck",
    "ArgChecker",
    "Build",
    "CleanReport",
    "Engine",
    "EngineProcess",
    "EngineProfile",
    "EngineSizing",
    "FailureClass",
    "InstalledEngine",
    "KvCapacity",
    "LaunchSpec",
    "VllmArgChecker",
    "VllmEngine",
    "build_argv",
    "build_profile",
    "classify_failure",
    "clean_stale_shm",
    "default_launcher",
    "default_space_path",
    "detect_profile",
    "free_port",
    "install_signal_handlers",
    "installed_build",
    "installed_engine",
    "live_count",
    "parse_engine_args",
    "parse_kv_capacity",
    "parse_size",
    "port_is_free",
    "preview_profile",
    "select_profile",
    "sizing_from_argv",
    "stop_all",
    "supported_knobs",
]
