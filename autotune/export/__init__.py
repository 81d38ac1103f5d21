"""Export the best configuration: ``vllm serve --config`` YAML and the equivalent command line."""

from __future__ import annotations

from autotune.export._study import export_best, measured_engine_argv
from autotune.export._yaml import ExportedConfig, args_to_config, build_export, config_to_argv, write_export

__all__ = [
    "ExportedConfig",
    "args_to_config",
    "build_export",
    "config_to_argv",
    "export_best",
    "measured_engine_argv",
    "write_export",
]
