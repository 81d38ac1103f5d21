"""Launch, watch and stop the engine (vLLM): subprocesses, ports, logs, flags. Never imports optuna.

:class:`Engine` is the seam the rest of the tool uses; :data:`VLLM` implements it."""

from __future__ import annotations

from autotune.engine._chart import (
    CHART,
    CHART_COMMIT,
    CHART_FLAGS,
    chart_command,
    check_entry,
    go_plain,
    number,
)
from autotune.engine._config_file import args_to_config, canonical_flags, config_to_argv, typed_value
from autotune.engine._connector_log import ConnectorHits, connector_hits
from autotune.engine._cpu_dtype import FLOAT32_KV_SCALE, serves_float32
from autotune.engine._flags import (
    API_SERVER_MODULE,
    HOST_POOL_FLAGS,
    MEMORY_KNOB_FLAGS,
    PP_FLAGS,
    SERVE_LAUNCHER,
    TP_FLAGS,
    block_size_of,
    budget_flag,
    command_launcher,
    command_model_and_flags,
    config_command,
    fixed_max_model_len,
    fixes_budget,
    flag_int,
    flags_less,
    host_pool_flag,
    model_args,
    parallel_ranks,
    same_flags,
    served_name,
    transfer_config,
)
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
from autotune.engine._render import render_values
from autotune.engine._rundir import clean_leftover_engines
from autotune.engine._seam import ArgChecker, Engine
from autotune.engine._shm import CleanReport, clean_stale_shm
from autotune.engine._sizing import EngineSizing, sizes_memory, sizing_from_argv
from autotune.engine._startup import startup_phases
from autotune.engine._vllm import ENGINES_BY_NAME, VLLM, VLLM_METRICS, engine_named

__all__ = [
    "API_SERVER_MODULE",
    "CHART",
    "CHART_COMMIT",
    "CHART_FLAGS",
    "CPU_FLAGS_ENV",
    "ENGINES_BY_NAME",
    "FLOAT32_KV_SCALE",
    "HOST_POOL_FLAGS",
    "MEMORY_KNOB_FLAGS",
    "PP_FLAGS",
    "SERVE_LAUNCHER",
    "TP_FLAGS",
    "VLLM",
    "VLLM_METRICS",
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
    "args_to_config",
    "block_size_of",
    "budget_flag",
    "build_profile",
    "canonical_flags",
    "chart_command",
    "check_entry",
    "clean_leftover_engines",
    "clean_stale_shm",
    "command_launcher",
    "command_model_and_flags",
    "config_command",
    "config_to_argv",
    "connector_hits",
    "cpu_build_isa_note",
    "default_launcher",
    "detect_profile",
    "engine_named",
    "fixed_max_model_len",
    "fixes_budget",
    "flag_int",
    "flags_less",
    "go_plain",
    "host_pool_flag",
    "install_signal_handlers",
    "installed_engine",
    "kernel_fallback_note",
    "lmcache_ops",
    "model_args",
    "number",
    "parallel_ranks",
    "render_values",
    "same_flags",
    "select_profile",
    "served_name",
    "serves_float32",
    "sizes_memory",
    "sizing_from_argv",
    "startup_phases",
    "startup_warnings",
    "stop_all",
    "supported_knobs",
    "terminated",
    "transfer_config",
    "typed_value",
]
