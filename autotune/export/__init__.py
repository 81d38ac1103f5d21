"""Export the best configuration: ``vllm serve --config`` YAML and the equivalent command line."""

from __future__ import annotations

from autotune.export._study import export_best
from autotune.export._yaml import ExportedConfig, args_to_config, build_export, config_to_argv, write_export

__all__ = [
    "ExportedConfig",
    "args_to_config",
    "build_export",
    "config_to_argv",
    "export_best",
    "write_export",
]
