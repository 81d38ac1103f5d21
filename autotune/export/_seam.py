"""The exporter seam: one output format per exporter, the measured engines in, one file's text out.

``vllm-config`` (:class:`~autotune.export._yaml.VllmConfigExporter`, the default) is the YAML that
``vllm serve --config`` reads; ``helm-values`` (:class:`~autotune.export._helm.HelmValuesExporter`)
is a values.yaml for vLLM's production-stack Helm chart. Both take what the study measured, an
:class:`ExportedConfig` per engine, already checked against the stored command; neither reads the
study. The format names are the study option's (``StudySpec.export_format``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from autotune.errors import ConfigError
from autotune.export._helm import HelmValuesExporter
from autotune.export._yaml import ExportedConfig, VllmConfigExporter
from autotune.studyfile import EXPORT_FORMATS

__all__ = ["EXPORTERS", "Exporter", "exporter_for"]


class Exporter(Protocol):
    """One output format."""

    @property
    def name(self) -> str:
        """Its ``--export-format`` value."""
        ...

    @property
    def group_file(self) -> str | None:
        """The file a group export writes beside its per-model files (None: none)."""
        ...

    def render(self, engines: Mapping[str, ExportedConfig]) -> str:
        """The file's text for ``engines`` (name -> measured config); ExportError when it cannot hold them."""
        ...

    def deploy_command(self, exported: ExportedConfig, path: str | Path) -> str:
        """The command that deploys the file written at ``path``."""
        ...


EXPORTERS: Mapping[str, Exporter] = MappingProxyType(
    {e.name: e for e in (VllmConfigExporter(), HelmValuesExporter())}
)
assert tuple(EXPORTERS) == EXPORT_FORMATS, "the exporters and the study option's formats disagree"


def exporter_for(name: str) -> Exporter:
    """The exporter of ``--export-format NAME``; a one-line ConfigError naming the choices."""
    if name not in EXPORTERS:
        raise ConfigError(
            f"--export-format: {name!r} is not an export format (fix: one of {', '.join(EXPORT_FORMATS)})"
        )
    return EXPORTERS[name]
