"""``autotune capture``: record the traffic of a vLLM server where none is logged.

A pass-through proxy: clients talk to ``--listen``, every request goes on to ``--upstream`` unchanged,
and chat and completions requests are appended, anonymized (or raw with ``--raw``), to hourly
workload files in ``--out`` (``traffic-YYYYMMDDTHH.jsonl``), which ``--workload DIR`` reads back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.errors import ConfigError

__all__ = ["capture", "parse_listen"]

log = logging.getLogger(__name__)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` (all interfaces) -> (host, port); raises :class:`ConfigError`."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--listen: {listen!r} is not HOST:PORT (e.g. 0.0.0.0:8001 or :8001)")
    return host.strip("[]") or "0.0.0.0", int(port)


def capture(
    upstream: Annotated[str, typer.Option(help="The vLLM server to forward to, e.g. http://127.0.0.1:8000.")],
    out: Annotated[Path, typer.Option("--out", help="Folder of the hourly traffic files.", file_okay=False)],
    listen: Annotated[
        str, typer.Option(help="HOST:PORT (or :PORT) the proxy listens on.")
    ] = "127.0.0.1:8001",
    raw: Annotated[
        bool, typer.Option("--raw", help="Record prompts in clear text (no anonymization).")
    ] = False,
    max_disk_mb: Annotated[
        float | None, typer.Option(min=0.001, help="Keep the folder under this size: oldest files removed.")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="Local model directory whose tokenizer anonymizes (required unless --raw).",
            file_okay=False,
        ),
    ] = None,
    salt_env: Annotated[
        str,
        typer.Option("--salt-env", help="Environment variable holding the anonymization salt (never argv)."),
    ] = "AUTOTUNE_ANON_SALT",
) -> None:
    """Pass traffic through to vLLM and record it as a workload (anonymized unless --raw)."""
    from autotune.capture import RecorderConfig, TrafficRecorder, capture_app

    host, port = parse_listen(listen)
    _check(upstream, raw, model, salt_env)
    config = RecorderConfig(
        out_dir=out,
        raw=raw,
        model=model,
        salt_env=salt_env,
        max_disk_bytes=None if max_disk_mb is None else int(max_disk_mb * 2**20),
    )
    recorder = TrafficRecorder(config)
    mode = "raw" if raw else "anonymized"
    typer.echo(f"capture: {host}:{port} -> {upstream}, {mode} records in {out}")
    try:
        _serve(capture_app(upstream.rstrip("/"), recorder), host, port)
    finally:
        recorder.close()
        if recorder.dropped:
            log.warning("capture: %d records dropped (the writer fell behind or stopped)", recorder.dropped)


def _check(upstream: str, raw: bool, model: Path | None, salt_env: str) -> None:
    """An upstream URL, and what anonymizing needs (a model and a salt), unless --raw."""
    if not upstream.startswith(("http://", "https://")):
        raise ConfigError(f"--upstream: {upstream!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
    if raw:
        return
    if model is None:
        raise ConfigError("--model: required to anonymize (pass the served model's directory, or --raw)")
    if not os.environ.get(salt_env):
        raise ConfigError(f"--salt-env: environment variable {salt_env} is not set (export it to a secret)")


def _serve(app: Any, host: str, port: int) -> None:
    """Serve the proxy until it is stopped."""
    import uvicorn

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # a line per request costs CPU on the request's path
        lifespan="on",
        server_header=False,  # the upstream's own Server and Date headers pass through
        date_header=False,
    )
