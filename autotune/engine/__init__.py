"""Launch, watch and stop vLLM: subprocesses, ports, logs, flags. Never imports optuna."""

from __future__ import annotations

from autotune.engine._argcheck import ArgCheck, VllmArgChecker
from autotune.engine._launch import CPU_LAUNCHER, GPU_LAUNCHER, LaunchSpec, build_argv, parse_engine_args
from autotune.engine._logscan import FailureClass, KvCapacity, classify_failure, parse_kv_capacity
from autotune.engine._platform import default_launcher, installed_build
from autotune.engine._process import EngineProcess, free_port, port_is_free
from autotune.engine._reaper import install_signal_handlers, live_count, stop_all

__all__ = [
    "CPU_LAUNCHER",
    "GPU_LAUNCHER",
    "ArgCheck",
    "EngineProcess",
    "FailureClass",
    "KvCapacity",
    "LaunchSpec",
    "VllmArgChecker",
    "build_argv",
    "classify_failure",
    "default_launcher",
    "free_port",
    "install_signal_handlers",
    "installed_build",
    "live_count",
    "parse_engine_args",
    "parse_kv_capacity",
    "port_is_free",
    "stop_all",
]
