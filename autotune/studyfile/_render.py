"""A study file written out with a comment on every key (``autotune init``): the keys it sets, then
every other study key commented out at its default, each with its help."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from autotune.studyfile._file import field_meta
from autotune.studyfile._model import StudySpec

__all__ = ["commented_study_file"]


def _yaml_value(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _comment(text: str, width: int = 100) -> list[str]:
    return ["# " + line for line in textwrap.wrap(text, width - 2)]


def commented_study_file(values: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """YAML for ``values`` (study keys), each other key commented out at its default; ``header``: lines of
    what was found (the machine, the workload) put first as comments."""
    lines = [*(f"# {h}" for h in header)]
    if header:
        lines.append("")
    spec = StudySpec.model_validate(dict(values))
    for name, info in StudySpec.model_fields.items():
        meta = field_meta(name)
        if meta.get("cli_only"):
            continue
        lines += _comment(f"{info.description} [{', '.join(meta['commands'])}]")
        if name in values:
            lines.append(
                f"{name}: {_yaml_value(getattr(spec, name) if name not in values else values[name])}"
            )
        else:
            default = info.default
            shown = (
                ""
                if default is None
                else f" {_yaml_value(str(default) if hasattr(default, 'parts') else default)}"
            )
            lines.append(f"# {name}:{shown}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
