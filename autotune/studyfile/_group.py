"""A study of several models on one server: ``models:`` (the engines that share the machine) and
``share:`` (the budgets they must fit together) in a study file, read and checked.

``group_objective:`` folds the models' figures into the group's one number: ``pareto`` (the
default), ``worst`` or ``weighted_sum`` (:mod:`autotune.study._group_objective`).

Every other key of the file is a study key (:class:`~autotune.studyfile.StudySpec`) that applies to each
model; a model's own ``model``, ``workload``, ``engine_args``, ``slo`` and ``space`` are set under its
entry. Each model's effective study is :meth:`GroupFile.member_file` resolved as one engine's is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from autotune.errors import ConfigError
from autotune.studyfile._file import StudyFile, key_lines, read_yaml_mapping, study_file_from
from autotune.studyfile._model import slo_items

__all__ = [
    "GROUP_MODES",
    "GroupFile",
    "GroupMember",
    "GroupMode",
    "GroupShare",
    "is_group_file",
    "load_group_file",
    "parse_bytes",
]

GroupMode = Literal["pareto", "worst", "weighted_sum"]
GROUP_MODES: tuple[GroupMode, ...] = get_args(GroupMode)

_PER_MODEL = ("model", "workload")  # keys each entry sets for itself (not a top-level key of a group)
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_bytes(value: Any) -> int:
    """A byte count as vLLM's ``--kv-cache-memory-bytes`` reads it: ``256M`` (MiB), ``1.5g`` (10^9), 1024."""
    text = str(value).strip()
    try:
        if text and text[-1] in _BINARY:
            return int(text[:-1]) * _BINARY[text[-1]]
        if text and text[-1] in _DECIMAL:
            return int(float(text[:-1]) * _DECIMAL[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a byte count (fix: e.g. 256M, 2G or 1000000)") from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupMember(_Strict):
    """One engine of the group: its model, its traffic, its fixed flags; its weight in the objective."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
    model: str
    workload: str
    engine_args: tuple[str, ...] = ()
    weight: float = Field(1.0, gt=0)
    slo: Annotated[tuple[str, ...], BeforeValidator(slo_items)] = ()
    space: str | None = None


def _bytes_or_none(value: Any) -> Any:
    return None if value is None else parse_bytes(value)


class GroupShare(_Strict):
    """The budgets the group fits together, and the split the operator runs today (``baseline``:
    each model's share of the budget, or on GPUs its ``--gpu-memory-utilization``; none: equal)."""

    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    host_pool_gb: float | None = Field(None, ge=0)
    host_share: float | None = Field(None, gt=0, le=1)
    kv_cache_memory_bytes: Annotated[int | None, BeforeValidator(_bytes_or_none)] = Field(None, gt=0)
    baseline: dict[str, float] | None = None

    @field_validator("baseline")
    @classmethod
    def _shares(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if any(v <= 0 for v in value.values()):
            raise ValueError(f"every share must be above 0, got {value} (fix: e.g. {{a: 0.45, b: 0.45}})")
        total = sum(value.values())
        if total > 1 + 1e-9:
            raise ValueError(f"the shares sum to {total:g}, above 1 (fix: shares whose sum is at most 1)")
        return value


@dataclass(frozen=True)
class GroupFile:
    """A group study file: its models, its budgets, the study keys common to every model (``common``)."""

    path: Path
    members: tuple[GroupMember, ...]
    share: GroupShare
    common: StudyFile
    lines: Mapping[str, int] = field(default_factory=dict)  # "models.NAME", "share.KEY" -> line
    objective: GroupMode = "pareto"  # group_objective: how the models' figures fold into one

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def member_file(self, member: GroupMember) -> StudyFile:
        """The study file as one model of the group sees it: the common keys plus its own."""
        folder = self.path.parent
        values = dict(self.common.values)
        values["model"] = _relative(member.model, folder, hub_ok=True)
        values["workload"] = _relative(member.workload, folder)
        values["engine_args"] = (*values.get("engine_args", ()), *member.engine_args)
        if member.slo:
            values["slo"] = member.slo
        if member.space is not None:
            values["space"] = _relative(member.space, folder)
        line = self.lines.get(f"models.{member.name}")
        lines = {**self.common.lines, **{k: line for k in ("model", "workload", "slo", "space") if line}}
        return StudyFile(path=self.path, values=values, lines=lines)


def _relative(value: str, folder: Path, *, hub_ok: bool = False) -> str:
    if Path(value).expanduser().is_absolute():
        return value
    if hub_ok and not (value.startswith(".") or (folder / value).exists()):
        return value  # a hub name such as org/model
    return os.path.normpath(folder / value)


def is_group_file(path: Path) -> bool:
    """Whether a study file declares ``models:`` (a study of several models on one server)."""
    data, _ = read_yaml_mapping(path)
    return "models" in data


def _node_lines(text: str) -> dict[str, int]:
    """Lines of each ``models:`` entry (by its name) and each ``share:`` key."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}
    for key, node in root.value if isinstance(root, yaml.MappingNode) else ():
        if key.value == "models" and isinstance(node, yaml.SequenceNode):
            for i, entry in enumerate(node.value):
                out[f"models[{i}]"] = entry.start_mark.line + 1
                name = next(
                    (v.value for k, v in getattr(entry, "value", ()) if getattr(k, "value", None) == "name"),
                    None,
                )
                if isinstance(name, str):
                    out.setdefault(f"models.{name}", entry.start_mark.line + 1)
        if key.value == "share" and isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                out[f"share.{k.value}"] = k.start_mark.line + 1
    return out


def _error(where: str, prefix: str, exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    fix = "" if "fix:" in msg else " (fix: see the README's 'Several models on one server')"
    return ConfigError(f"{where}: {prefix}{loc}: {err.get('input')!r}: {msg}{fix}")


def _members(path: Path, raw: Any, lines: Mapping[str, int], top: int | None) -> tuple[GroupMember, ...]:
    where_models = f"{path}:{top}" if top else str(path)
    if not isinstance(raw, list) or len(raw) < 2:
        raise ConfigError(
            f"{where_models}: models: a list of at least two engines, got {raw!r} "
            "(fix: entries with name, model and workload; one model is a plain study file)"
        )
    members: list[GroupMember] = []
    for i, entry in enumerate(raw):
        where = f"{path}:{lines[f'models[{i}]']}" if f"models[{i}]" in lines else where_models
        try:
            member = GroupMember.model_validate(entry)
        except ValidationError as exc:
            raise _error(where, f"models[{i}].", exc) from None
        if member.name in {m.name for m in members}:
            raise ConfigError(
                f"{where}: models[{i}].name: {member.name!r} names two entries (fix: a unique name per "
                "model: it names its port, log and export)"
            )
        members.append(member)
    return tuple(members)


def _group_mode(path: Path, value: Any, line: int | None) -> GroupMode:
    """The ``group_objective:`` key's value, or a one-line error naming the key, value and choices."""
    if value is None:
        return "pareto"
    if value not in GROUP_MODES:
        raise ConfigError(
            f"{path}:{line or '?'}: group_objective: {value!r} is not a group objective (fix: one of "
            f"{', '.join(GROUP_MODES)})"
        )
    return cast(GroupMode, value)


def load_group_file(path: Path) -> GroupFile | None:
    """Read and check a group study file; None when the file declares no ``models:``."""
    data, text = read_yaml_mapping(path)
    if "models" not in data:
        for key in ("share", "group_objective"):
            if key in data:
                raise ConfigError(
                    f"{path}:{key_lines(text).get(key, '?')}: {key}: needs models: (fix: list the models)"
                )
        return None
    top = key_lines(text)
    lines = _node_lines(text)
    for key in _PER_MODEL:
        if key in data:
            raise ConfigError(
                f"{path}:{top.get(key, '?')}: {key!r}: a study of several models sets it under each entry of "
                f"models: (fix: move it into the models: entries)"
            )
    members = _members(path, data.pop("models"), lines, top.get("models"))
    mode = _group_mode(path, data.pop("group_objective", None), top.get("group_objective"))
    try:
        share = GroupShare.model_validate(data.pop("share", None) or {})
    except ValidationError as exc:
        key = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        where = f"{path}:{lines.get(f'share.{key}') or top.get('share', '?')}"
        raise _error(where, "share.", exc) from None
    unknown = sorted(set(share.baseline or {}) - {m.name for m in members})
    if unknown:
        raise ConfigError(
            f"{path}:{lines.get('share.baseline', '?')}: share.baseline: {unknown[0]!r} is not a model of "
            f"models: (fix: one of {', '.join(m.name for m in members)})"
        )
    missing = [m.name for m in members if share.baseline is not None and m.name not in share.baseline]
    if missing:
        raise ConfigError(
            f"{path}:{lines.get('share.baseline', '?')}: share.baseline: no share for {missing[0]!r} (fix: a "
            "share for every model, or no share.baseline for an equal split)"
        )
    common = study_file_from(
        path, data, {k: v for k, v in top.items() if k not in ("models", "share", "group_objective")}
    )
    return GroupFile(
        path=Path(path), members=members, share=share, common=common, lines=lines, objective=mode
    )
