"""Launch, watch and stop the engine (vLLM): subprocesses, ports, logs, flags. Never imports optuna.

:class:`Engine` is the seam the rest of the tool uses; :data:`VLLM` implements it."""

from __future__ import annotations

from autotune.engine._connector_log import ConnectorHits, connector_hits
from autotune.engine._cpu_dtype import FLOAT32_KV_SCALE, serves_float32
from autotune.engine._launch import LaunchSpec
from autotune.engine._lease import GpuLease
from autotune.engine._lmcache_ops import lmcache_ops
from autotune.engine._logscan import FailureClass, kernel_fallback_note
from autotune.engine._notes import startup_warnings
from autotune.engine._platform import CPU_FLAGS_ENV, cpu_build_isa_note, default_launcher, installed_engine
from autotune.engine._process import EngineProcess
from autotune.engine._profiles import (
    EngineProfile,
    InstalledEngine,
    build_profile,
    detect_profile,
    select_profile,
    supported_knobs,
)
from autotune.engine._reaper import install_signal_handlers, stop_all, terminated
from autotune.engine._rundir import clean_leftover_engines
from autotune.engine._seam import ArgChecker, Engine
from autotune.engine._shm import CleanReport, clean_stale_shm
from autotune.engine._sizing import EngineSizing, sizing_from_argv
from autotune.engine._startup import startup_phases
from autotune.engine._vllm import VLLM

__all__ = [
    "CPU_FLAGS_ENV",
    "FLOAT32_KV_SCALE",
    "VLLM",
    "ArgChecker",
    "CleanReport",
    "ConnectorHits",
    "Engine",
    "EngineProcess",
    "EngineProfile",
    "EngineSizing",
    "FailureClass",
    "GpuLease",
    "InstalledEngine",
    "LaunchSpec",
    "build_profile",
    "clean_leftover_engines",
    "clean_stale_shm",
    "connector_hits",
    "cpu_build_isa_note",
    "default_launcher",
    "detect_profile",
    "install_signal_handlers",
    "installed_engine",
    "kernel_fallback_note",
    "lmcache_ops",
    "select_profile",
    "serves_float32",
    "sizing_from_argv",
    "startup_phases",
    "startup_warnings",
    "stop_all",
    "supported_knobs",
    "terminated",
]
