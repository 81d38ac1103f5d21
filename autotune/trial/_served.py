"""What a measurement needs of the server it replays against: its URL, how long it took to start and
what it printed. A trial's :class:`~autotune.engine.EngineProcess` is one; :class:`RunningServer` is a
server someone else started (``autotune bench``), whose start and log the tool never saw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import httpx

from autotune.engine import Engine, LaunchSpec, served_name

__all__ = ["RunningServer", "Served", "served_model"]


class Served(Protocol):
    @property
    def base_url(self) -> str: ...

    @property
    def startup_s(self) -> float | None: ...

    def log_text(self) -> str: ...


@dataclass(frozen=True)
class RunningServer:
    """A server already running at ``base_url``: nothing of it is started, stopped or read but HTTP."""

    base_url: str
    startup_s: float | None = None

    def log_text(self) -> str:
        return ""  # its log is not ours: no KV capacity, connector lines or kernel notes from it


async def served_model(client: httpx.AsyncClient, base_url: str, engine: Engine, spec: LaunchSpec) -> str:
    """The model the engine serves (``GET /v1/models``), else the name it was started with."""
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    try:
        resp = await client.get(base_url + engine.endpoints.models, headers=headers, timeout=10.0)
        data = resp.json().get("data") or []
        if data:
            return str(data[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError):
        pass
    return served_name(spec.fixed_args) or spec.model
