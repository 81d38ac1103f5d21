"""What the rest of the tool needs from an inference engine, as one protocol.

vLLM is the implementation (:mod:`autotune.engine._vllm`). A second engine (SGLang, say) is a
new module implementing :class:`Engine` plus a search space; nothing above ``engine/`` changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from autotune.bench import MetricNames
from autotune.engine._argcheck import ArgCheck
from autotune.engine._connector_log import ConnectorHits
from autotune.engine._launch import LaunchSpec
from autotune.engine._logscan import KvCapacity
from autotune.engine._platform import InstalledEngine
from autotune.engine._process import EngineProcess
from autotune.engine._profiles import EngineProfile
from autotune.engine._sizing import EngineSizing
from autotune.space import EngineConfig, FlagPairs, RenderedConfig

__all__ = ["ArgChecker", "Endpoints", "Engine", "EngineInstall", "EngineLog"]


class ArgChecker(Protocol):
    """The engine's own argument parser, asked before a launch."""

    version: str | None

    def check(self, engine_argv: Sequence[str]) -> ArgCheck: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Endpoints:
    """Where the engine's server answers: health, metrics (and where its /metrics keeps each figure),
    the served models."""

    health: str
    metrics: str
    models: str
    metric_names: MetricNames


class EngineLog(Protocol):
    """What the engine's log says, each read from the log's text."""

    def kv_capacity(self, log_text: str) -> KvCapacity | None: ...

    def startup_phases(self, log_text: str) -> dict[str, float]:
        """Seconds per start-up phase (imports, weights, compile, graphs, ...); only phases whose
        lines the log holds."""
        ...

    def connector_hits(self, log_text: str) -> ConnectorHits | None:
        """What its KV connector says it served, from the connector's own log lines (None: no such
        lines)."""
        ...


class EngineInstall(Protocol):
    """The installed engine and what a study starts from: its version, launcher, the operator's
    fixed flags as it reads them, its profile and default space."""

    def installed(self) -> InstalledEngine: ...

    def default_launcher(self) -> tuple[str, ...]: ...

    def parse_fixed_args(self, raw: Sequence[str]) -> FlagPairs: ...

    def select_profile(
        self, name: str | None, *, preview: bool = False
    ) -> tuple[EngineProfile, str | None]: ...

    def default_space(self, profile: EngineProfile) -> Path: ...


class Engine(Protocol):
    """An inference engine the tool can tune: what a trial needs (its command, its process, which
    answers health and stops, the argument check and the memory sizing), with where it answers, what
    its log says and how it is installed as small objects of their own."""

    @property
    def name(self) -> str: ...

    @property
    def endpoints(self) -> Endpoints: ...

    @property
    def log(self) -> EngineLog: ...

    @property
    def install(self) -> EngineInstall: ...

    def render(self, config: EngineConfig) -> RenderedConfig:
        """``config`` in the engine's words (the flags and environment a trial adds; kept in its record)."""
        ...

    def argv(self, spec: LaunchSpec, config: EngineConfig, port: int) -> list[str]:
        """The full command that launches ``config`` (launcher, model, fixed flags, its own)."""
        ...

    def process(
        self,
        spec: LaunchSpec,
        config: EngineConfig,
        log_path: Path,
        *,
        shm_patterns: tuple[str, ...] = (),
    ) -> EngineProcess:
        """The engine for one configuration; ``shm_patterns``: /dev/shm files its profile's pool leaves."""
        ...

    def arg_checker(self) -> ArgChecker: ...

    def sizing(
        self, spec: LaunchSpec, config: EngineConfig, platform: Literal["cuda", "cpu"]
    ) -> EngineSizing:
        """What ``config`` asks of memory, launched with ``spec``'s fixed flags (the engine's defaults
        filled in): the one reading of a configuration's sizing."""
        ...
