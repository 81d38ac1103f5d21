"""A study file read and the effective study resolved: the model's defaults (per command), the study's
recorded choices (a worker joining), the file, then the flags given on the command line.

Relative paths in a study file are relative to the file's own folder (as in a compose file), so a
study file travels with its workload; relative paths given as flags are relative to the working
directory, as on every command line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import ConfigError
from autotune.space import merge_flag_items
from autotune.studyfile._model import COMMANDS, StudySpec

__all__ = [
    "GROUP_KEYS",
    "StudyFile",
    "field_meta",
    "fields_for",
    "key_lines",
    "load_study_file",
    "read_yaml_mapping",
    "resolve_spec",
    "spec_fingerprint",
    "study_file_from",
    "study_record",
]

GROUP_KEYS = ("models", "share")  # the keys of a study of several models (autotune.studyfile._group)


def field_meta(name: str) -> dict[str, Any]:
    extra = StudySpec.model_fields[name].json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def fields_for(command: str) -> list[str]:
    """The fields a command takes, in declaration order (its options, generated from them)."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    return [n for n in StudySpec.model_fields if command in field_meta(n).get("commands", ())]


def _is_path(name: str) -> bool:
    tp = StudySpec.model_fields[name].annotation
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    return Path in args


def _relative_path(name: str, value: str, folder: Path) -> bool:
    """A relative path to read against the file's folder: a path field, or a model that is a folder there
    (a hub name such as ``org/model`` stays as it is)."""
    if Path(value).expanduser().is_absolute():
        return False
    return _is_path(name) or (name == "model" and (value.startswith(".") or (folder / value).exists()))


@dataclass(frozen=True)
class StudyFile:
    """The keys a study file sets (paths already made relative to the working directory's view)."""

    path: Path
    values: Mapping[str, Any]
    lines: Mapping[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)


def key_lines(text: str) -> dict[str, int]:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def _closest(key: str) -> str:
    keys = [n for n in StudySpec.model_fields if not field_meta(n).get("cli_only")]
    near = difflib.get_close_matches(key.replace("-", "_"), keys, n=1, cutoff=0.5)
    return f"did you mean '{near[0]}'?" if near else "see `autotune init` for every key"


def read_yaml_mapping(path: Path) -> tuple[dict[Any, Any], str]:
    """A study file's YAML mapping and its text (a one-line error when it is not one)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--file: cannot read {path}: {exc} (fix: the path of a study YAML file)") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(
            f"{where}: not valid YAML: {getattr(exc, 'problem', exc)} (fix: the YAML syntax)"
        ) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a study file is a mapping of keys to values, not {type(data).__name__}")
    return data, text


def load_study_file(path: Path) -> StudyFile:
    """Read and check a study file: YAML mapping, known keys, values of the right type (one line each)."""
    data, text = read_yaml_mapping(path)
    lines = key_lines(text)
    for key in GROUP_KEYS:
        if key in data:
            raise ConfigError(
                f"{path}:{lines.get(key, '?')}: {key!r}: a study of several models on one server runs with "
                f"`autotune run -f {path}` and `autotune nightly -f {path}`; this command takes one model's "
                "study (fix: one of those, or a study file of one model)"
            )
    return study_file_from(path, data, lines)


def study_file_from(path: Path, data: Mapping[Any, Any], lines: Mapping[str, int]) -> StudyFile:
    """The study keys of a file's mapping, checked (``lines``: each key's line in the file)."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        where = f"{path}:{lines[key]}" if key in lines else str(path)
        if name not in StudySpec.model_fields:
            raise ConfigError(f"{where}: unknown key {key!r} ({_closest(str(key))})")
        if field_meta(name).get("cli_only"):
            raise ConfigError(
                f"{where}: {key!r} is an action of one command line, not a study key (fix: pass "
                f"--{name.replace('_', '-')} on the command line)"
            )
        if value is not None and _relative_path(name, str(value), Path(path).parent):
            value = os.path.normpath(Path(path).parent / str(value))
        values[name] = value
    found = StudyFile(
        path=Path(path), values=values, lines={str(k).replace("-", "_"): v for k, v in lines.items()}
    )
    _validate(values, found)
    return found


def _validate(values: Mapping[str, Any], source: StudyFile | None) -> StudySpec:
    try:
        return StudySpec.model_validate(dict(values))
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        where = source.where(name) if source is not None else f"--{name.replace('_', '-')}"
        bad = err.get("input")
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(
            f"{where}: {name}: {bad!r}: {msg}" + ("" if "fix:" in msg else f" (fix: {_hint(name)})")
        ) from None


def _hint(name: str) -> str:
    tp = StudySpec.model_fields[name].annotation
    if typing.get_origin(tp) is typing.Literal:
        return "one of " + ", ".join(str(choice) for choice in typing.get_args(tp))
    return f"a value of type {getattr(tp, '__name__', None) or str(tp).replace('typing.', '')}"


def resolve_spec(
    command: str,
    *,
    flags: Mapping[str, Any],
    file: StudyFile | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> StudySpec:
    """The effective study of one command: defaults < recorded < file < flags. ``engine_args`` of a
    later layer are added to the earlier ones' (a flag given again replaces only that flag)."""
    values: dict[str, Any] = {}
    for name in StudySpec.model_fields:
        per_command = field_meta(name).get("defaults", {})
        if command in per_command:
            values[name] = per_command[command]
    for layer in (recorded or {}, file.values if file else {}, flags):
        for k, v in layer.items():
            if k in _MERGED and values.get(k) and v is not None:
                values[k] = _merge(values[k], v)  # a flag adds to the file's list
            elif k in StudySpec.model_fields:
                values[k] = v
    try:
        return StudySpec.model_validate(values)
    except ValidationError:
        _validate(flags, None)  # a flag's own error first, named as the flag
        return _validate(values, file)


_MERGED = (
    "engine_args",
    "baseline_args",
)  # lists of vLLM flags: a later layer adds to them, a flag given again replaces it


def _merge(base: Any, added: Any) -> Any:
    """Two layers' ``engine_args``: ``added`` on top of ``base`` (see :func:`autotune.space.merge_flag_items`)."""
    if not isinstance(base, list | tuple) or not isinstance(added, list | tuple):
        return added  # not a list: the model's own check names it
    try:
        return merge_flag_items([str(x) for x in base], [str(x) for x in added])
    except ConfigError:
        return added  # unreadable: left to the engine's own reading, which names it


def study_record(spec: StudySpec) -> dict[str, Any]:
    """The effective study as JSON values (recorded in the study, shown by ``autotune show``): the study
    keys only, not one invocation's actions."""
    data = spec.model_dump(mode="json")
    return {k: v for k, v in data.items() if not field_meta(k).get("cli_only")}


def _in_fingerprint(name: str, data: Mapping[str, object]) -> bool:
    """A fingerprint field; one that matters only with another key's value (``fingerprint_when``:
    the capacity options, with ``objective: capacity``) only then, and one with a
    ``fingerprint_unless`` value (``engine: vllm``) only at another value, so studies made before it
    was added keep their hash."""
    meta = field_meta(name)
    when = meta.get("fingerprint_when")
    if "fingerprint_unless" in meta and data.get(name) == meta["fingerprint_unless"]:
        return False  # the default, which studies made before the key measured with
    return bool(meta.get("fingerprint")) and (when is None or data.get(when[0]) == when[1])


def spec_fingerprint(spec: StudySpec, contents: Mapping[str, str]) -> str:
    """A hash of what the study measures and how it judges it: the fingerprint fields, with the
    files' contents (``contents``: field -> hash of the workload, model, space) in place of their paths."""
    data = spec.model_dump(mode="json")
    chosen = {k: contents.get(k, data[k]) for k in data if _in_fingerprint(k, data)}
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]
