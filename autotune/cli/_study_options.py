"""Command-line options generated from the study model (:class:`autotune.studyfile.StudySpec`): the name,
type, default and help of each option are written once, in the model. :func:`study_command` turns
``def run(spec: StudySpec) -> None`` into a Typer command whose options are the fields the model gives
``run``, plus ``--file/-f study.yaml``; the flags given on the command line override the file.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from autotune.studyfile import (
    GroupFile,
    StudySpec,
    field_meta,
    fields_for,
    load_group_file,
    load_study_file,
    resolve_spec,
)

# typer needs Optional[...] at runtime on Python 3.10
# ruff: noqa: UP045

__all__ = [
    "FILE_HELP",
    "ExportFormatOption",
    "Storage",
    "StudiesDir",
    "cli_option",
    "explicit_flags",
    "study_command",
]

FILE_HELP = (
    "Study file (YAML): every option below as a key (its long name with underscores); a flag given here "
    "overrides the file. `autotune init` writes one."
)
_GIVEN = ("COMMANDLINE", "ENVIRONMENT")  # parameter sources of a value the user gave


def _cli_type(name: str) -> Any:
    """The field's type as Typer takes it: repeatable options as lists, literals as str, optionals kept."""
    tp = StudySpec.model_fields[name].annotation
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return Optional[list[args[0]]]  # type: ignore[valid-type]
    if origin is typing.Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return Optional[inner]
    return tp


# ``--help`` groups the options by topic: each panel starts at the first field of a section of the
# study model (autotune/studyfile/_model.py), in declaration order
_PANEL_STARTS = {
    "workload": "Workload and arrivals",
    "model": "Engine and model",
    "objective": "Objective and judging",
    "study": "Where the study lives",
    "n_trials": "How much to run",
    "out": "What comes out",
    "config": "Compare's arms",
    "dry_run": "This invocation",
}


def _panel(name: str) -> str:
    panel = "Options"
    for field in StudySpec.model_fields:
        panel = _PANEL_STARTS.get(field, panel)
        if field == name:
            return panel
    return panel


def cli_option(name: str, command: str | None = None) -> tuple[Any, Any]:
    """(annotation, default) of the option for field ``name``, as ``command`` shows it."""
    meta = field_meta(name)
    info = StudySpec.model_fields[name]
    default = meta.get("defaults", {}).get(command, info.default)
    flag = meta.get("flag") or "--" + name.replace("_", "-")
    tp = _cli_type(name)
    decls = [flag]
    if tp is bool:
        decls = [f"{flag}/--no-{flag.removeprefix('--')}"]
    if meta.get("short"):
        decls.append(meta["short"])
    kwargs: dict[str, Any] = {"help": info.description, "rich_help_panel": _panel(name)}
    if "minimum" in meta:
        kwargs["min"] = meta["minimum"]
    if isinstance(default, tuple):
        default = None  # a repeatable option: none given
    return Annotated[tp, typer.Option(*decls, **kwargs)], default


Storage = cli_option("storage")[0]
ExportPath = cli_option("out")[0]
StudiesDir = cli_option("studies_dir")[0]
ExportFormatOption = cli_option("export_format")[0]


def explicit_flags(ctx: typer.Context, values: Mapping[str, Any]) -> dict[str, Any]:
    """The options given on the command line (or by environment), not left at their defaults."""
    given = {}
    for name, value in values.items():
        if getattr(ctx.get_parameter_source(name), "name", None) in _GIVEN:
            given[name] = tuple(value) if isinstance(value, list) else value
    return given


def study_command(
    command: str,
    *,
    recorded: Callable[[StudySpec], Mapping[str, Any] | None] | None = None,
    group: Callable[[GroupFile, Mapping[str, Any]], None] | None = None,
) -> Callable[[Callable[[StudySpec], None]], Callable[..., None]]:
    """Decorate ``fn(spec)`` into a Typer command with ``--file`` and the model's options for ``command``.

    ``recorded``: what an existing study recorded (``worker``), read from the spec of the file and flags;
    it sits between the defaults and the file. ``group``: what runs a study file of several models
    (``models:``), given the file and the flags."""

    def decorate(fn: Callable[[StudySpec], None]) -> Callable[..., None]:
        params = [
            inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
            inspect.Parameter(
                "file",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[Optional[Path], typer.Option("--file", "-f", help=FILE_HELP)],
            ),
        ]
        for name in fields_for(command):
            annotation, default = cli_option(name, command)
            params.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
                )
            )

        @functools.wraps(fn)
        def command_fn(ctx: typer.Context, file: Path | None = None, **values: Any) -> None:
            if ctx.invoked_subcommand is not None:  # a group's own options (``nightly -f F history``): kept
                ctx.ensure_object(dict).update(file=file, flags=explicit_flags(ctx, values))
                return
            flags = explicit_flags(ctx, values)
            if group is not None and file is not None and (group_file := load_group_file(file)) is not None:
                group(group_file, flags)
                return
            study_file = load_study_file(file) if file is not None else None
            spec = resolve_spec(command, flags=flags, file=study_file)
            known = recorded(spec) if recorded is not None else None
            if known:
                spec = resolve_spec(command, flags=flags, file=study_file, recorded=known)
            fn(spec)

        command_fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command_fn.__annotations__ = {p.name: p.annotation for p in params}
        del command_fn.__wrapped__  # Typer reads this signature, not fn's
        return command_fn

    return decorate
