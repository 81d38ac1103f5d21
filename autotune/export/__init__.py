"""Export the best configuration: ``vllm serve --config`` YAML and the equivalent command line."""

from __future__ import annotations

from autotune.export._study import export_best, exports_the_same, measured_engine_argv, measured_launcher
from autotune.export._yaml import (
    SERVE_LAUNCHER,
    ExportedConfig,
    args_to_config,
    build_export,
    config_to_argv,
    runnable_launcher,
    write_export,
)

__all__ = [
    "SERVE_LAUNCHER",
    "ExportedConfig",
    "args_to_config",
    "build_export",
    "config_to_argv",
    "export_best",
    "exports_the_same",
    "measured_engine_argv",
    "measured_launcher",
    "runnable_launcher",
    "write_export",
]
