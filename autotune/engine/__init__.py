"""Launch, watch and stop the engine (vLLM): subprocesses, ports, logs, flags. Never imports optuna.

:class:`Engine` is the seam the rest of the tool uses; :data:`VLLM` implements it.
"""

from __future__ import annotations

from autotune.engine._argcheck import ArgCheck, VllmArgChecker, checker_env
from autotune.engine._connector_log import ConnectorHits, connector_hits
from autotune.engine._environ import engine_environ
from autotune.engine._launch import (
    CACHE_ENV_DIRS,
    CPU_LAUNCHER,
    GPU_LAUNCHER,
    LaunchSpec,
    build_argv,
    parse_engine_args,
)
from autotune.engine._lease import (
    LEASE_DIR_ENV,
    LEASE_ENV,
    GpuLease,
    LeaseHolder,
    lease_dir,
    lease_holders,
    stop_leftover_engines,
)
from autotune.engine._lmcache_ops import LmcacheOps, lmcache_ops
from autotune.engine._logscan import (
    FailureClass,
    KvCapacity,
    classify_failure,
    failure_evidence,
    failure_excerpt,
    kernel_fallback_note,
    parse_kv_capacity,
    root_cause_line,
)
from autotune.engine._notes import startup_warnings
from autotune.engine._platform import (
    Build,
    cpu_build_isa_note,
    default_launcher,
    installed_build,
    installed_engine,
)
from autotune.engine._process import EngineProcess, describe_exit, free_port, port_is_free, safe_python_env
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
from autotune.engine._rundir import clean_leftover_engines
from autotune.engine._seam import ArgChecker, Engine
from autotune.engine._shm import (
    DEFAULT_ENGINE_SHM_PATTERNS,
    CleanReport,
    ShmSnapshot,
    clean_new_shm,
    clean_stale_shm,
)
from autotune.engine._sizing import EngineSizing, parse_size, sizing_from_argv
from autotune.engine._startup import STARTUP_PHASES, startup_phases
from autotune.engine._vllm import VLLM, VllmEngine

__all__ = [
    "CACHE_ENV_DIRS",
    "CPU_LAUNCHER",
    "DEFAULT_ENGINE_SHM_PATTERNS",
    "GPU_LAUNCHER",
    "LEASE_DIR_ENV",
    "LEASE_ENV",
    "STARTUP_PHASES",
    "VLLM",
    "ArgCheck",
    "ArgChecker",
    "Build",
    "CleanReport",
    "ConnectorHits",
    "Engine",
    "EngineProcess",
    "EngineProfile",
    "EngineSizing",
    "FailureClass",
    "GpuLease",
    "InstalledEngine",
    "KvCapacity",
    "LaunchSpec",
    "LeaseHolder",
    "LmcacheOps",
    "ShmSnapshot",
    "VllmArgChecker",
    "VllmEngine",
    "build_argv",
    "build_profile",
    "checker_env",
    "classify_failure",
    "clean_leftover_engines",
    "clean_new_shm",
    "clean_stale_shm",
    "connector_hits",
    "cpu_build_isa_note",
    "default_launcher",
    "default_space_path",
    "describe_exit",
    "detect_profile",
    "engine_environ",
    "failure_evidence",
    "failure_excerpt",
    "free_port",
    "install_signal_handlers",
    "installed_build",
    "installed_engine",
    "kernel_fallback_note",
    "lease_dir",
    "lease_holders",
    "live_count",
    "lmcache_ops",
    "parse_engine_args",
    "parse_kv_capacity",
    "parse_size",
    "port_is_free",
    "preview_profile",
    "root_cause_line",
    "safe_python_env",
    "select_profile",
    "sizing_from_argv",
    "startup_phases",
    "startup_warnings",
    "stop_all",
    "stop_leftover_engines",
    "supported_knobs",
]
