"""Export the best configuration: ``vllm serve --config`` YAML (the default) or production-stack
Helm values (``--export-format helm-values``, :func:`exporter_for`), and the equivalent command line."""

from __future__ import annotations

from autotune.engine import CHART_COMMIT, chart_command
from autotune.export._seam import Exporter, exporter_for
from autotune.export._study import (
    Measured,
    export_best,
    export_measured,
    exports_the_same,
    measured_engine_argv,
    measured_launcher,
)
from autotune.export._yaml import (
    ExportedConfig,
    args_to_config,
    build_export,
    config_to_args,
    config_to_argv,
    runnable_launcher,
    write_atomically,
    write_export,
    write_text,
)

__all__ = [
    "CHART_COMMIT",
    "ExportedConfig",
    "Exporter",
    "Measured",
    "args_to_config",
    "build_export",
    "chart_command",
    "config_to_args",
    "config_to_argv",
    "export_best",
    "export_measured",
    "exporter_for",
    "exports_the_same",
    "measured_engine_argv",
    "measured_launcher",
    "runnable_launcher",
    "write_atomically",
    "write_export",
    "write_text",
]
