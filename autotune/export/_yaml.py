"""The best trial as a YAML file that ``vllm serve --config`` accepts, and as a command line."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ExportError
from autotune.space import flag_pairs

__all__ = ["ExportedConfig", "args_to_config", "build_export", "config_to_argv", "write_export"]

# Set by autotune for each trial, meaningless in deployment.
_DROP = {"--host", "--port"}


def typed_value(value: str) -> Any:
    """Keep a flag value's type in YAML: ints and floats as numbers, JSON objects as mappings."""
    if value.startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            continue
    return value


def args_to_config(argv: Sequence[str]) -> dict[str, Any]:
    """``["--block-size", "32", "--no-enable-prefix-caching"]`` -> ``{"block-size": 32,
    "no-enable-prefix-caching": True}``. A ``--no-x`` flag is written as ``no-x: true``: older
    ``vllm serve --config`` silently drop ``x: false``."""
    try:
        pairs = flag_pairs(argv)
    except ValueError as exc:
        raise ExportError(f"cannot export argument {exc.args[0]!r}: expected a --flag") from None
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in _DROP:
            continue
        out[name[2:].replace("_", "-")] = True if value is None else typed_value(value)  # vLLM reads both
    return out


def config_to_argv(config: Mapping[str, Any]) -> list[str]:
    """The inverse of :func:`args_to_config`, as ``vllm serve --config`` expands a YAML file."""
    argv: list[str] = []
    for key, value in config.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, sort_keys=True)]
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def numerics_lines(tuned: Mapping[str, Any]) -> list[str]:
    """A tuned value that changes the model's numerics (an fp8 KV cache) is said in the export."""
    dtype = str(tuned.get("kv-cache-dtype", "auto"))
    if dtype in ("auto", "bfloat16", "float16"):
        return []
    return [
        f"kv-cache-dtype {dtype} was chosen by the study (an opt-in knob): it changes numerics, keys and "
        "values are stored in 8 bits, so outputs can differ from the model's dtype; check quality before deploying"
    ]


@dataclass(frozen=True)
class ExportedConfig:
    config: Mapping[str, Any]  # YAML keys -> values
    command: str  # the equivalent `vllm serve` command line
    env: Mapping[str, str]  # environment the config needs (names and values, never secrets)
    header: str  # comment block: study, trial, figures


def build_export(
    *,
    model: str,
    fixed_argv: Sequence[str],
    tuned_argv: Sequence[str],
    env: Mapping[str, str],
    header_lines: Sequence[str],
) -> ExportedConfig:
    config: dict[str, Any] = {"model": model}
    config.update(args_to_config(list(fixed_argv)))
    tuned = args_to_config(list(tuned_argv))
    for key in tuned:  # a tuned --x replaces a fixed --x or --no-x
        stem = key[3:] if key.startswith("no-") else key
        config.pop(stem, None)
        config.pop("no-" + stem, None)
    config.update(tuned)
    flags = " ".join(
        shlex.quote(a) for a in config_to_argv({k: v for k, v in config.items() if k != "model"})
    )
    env_prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    command = f"{env_prefix + ' ' if env_prefix else ''}vllm serve {shlex.quote(model)} {flags}".strip()
    header = "\n".join(f"# {line}" if line else "#" for line in [*header_lines, *numerics_lines(tuned)])
    return ExportedConfig(config=config, command=command, env=dict(env), header=header)


def write_export(exported: ExportedConfig, path: Path) -> None:
    """Write atomically: a failed export never leaves a half-written file."""
    path = Path(path)
    body = yaml.safe_dump(dict(exported.config), sort_keys=False, default_flow_style=False)
    text = exported.header + "\n" + body
    if exported.env:
        text += "# environment: " + " ".join(f"{k}={v}" for k, v in exported.env.items()) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise ExportError(f"{path}: cannot write the exported config: {exc.strerror}") from exc
