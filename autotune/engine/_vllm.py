"""vLLM behind the :class:`~autotune.engine.Engine` seam: the one place that ties its launcher,
flags, endpoints, metric names, log lines, profiles and argument parser together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from autotune.bench import MetricNames
from autotune.engine._argcheck import VllmArgChecker
from autotune.engine._connector_log import ConnectorHits, connector_hits
from autotune.engine._cpu_dtype import launch_argv
from autotune.engine._launch import LaunchSpec, parse_engine_args
from autotune.engine._logscan import KvCapacity, parse_kv_capacity
from autotune.engine._platform import InstalledEngine, default_launcher, installed_engine
from autotune.engine._process import EngineProcess
from autotune.engine._profiles import EngineProfile, default_space_path, preview_profile, select_profile
from autotune.engine._render import render_config
from autotune.engine._seam import Endpoints
from autotune.engine._sizing import EngineSizing, sizing_from_argv
from autotune.engine._startup import startup_phases
from autotune.space import EngineConfig, FlagPairs, RenderedConfig

__all__ = ["ENGINES_BY_NAME", "VLLM", "VLLM_METRICS", "VllmEngine", "engine_named"]


@dataclass(frozen=True)
class VllmLog:
    """vLLM's log lines: the KV cache it sized, its start-up phases, its connector's hits."""

    def kv_capacity(self, log_text: str) -> KvCapacity | None:
        return parse_kv_capacity(log_text)

    def startup_phases(self, log_text: str) -> dict[str, float]:
        return startup_phases(log_text)

    def connector_hits(self, log_text: str) -> ConnectorHits | None:
        return connector_hits(log_text)  # LMCache's lookups (LMCacheConnectorV1)


@dataclass(frozen=True)
class VllmInstall:
    """The installed vLLM (GPU build: ``vllm serve``; CPU build: the module), its flags and profiles."""

    def installed(self) -> InstalledEngine:
        return installed_engine()

    def default_launcher(self) -> tuple[str, ...]:
        return default_launcher()

    def parse_fixed_args(self, raw: Sequence[str]) -> FlagPairs:
        return parse_engine_args(raw)

    def select_profile(self, name: str | None, *, preview: bool = False) -> tuple[EngineProfile, str | None]:
        """The profile to use; with ``preview`` (dry runs) a named GPU profile renders on a CPU
        machine as its own engine would take it, with a note saying so."""
        if preview and name is not None:
            return preview_profile(name)
        return select_profile(name), None

    def default_space(self, profile: EngineProfile) -> Path:
        return default_space_path(profile)


# vLLM's sample names on its /metrics.
VLLM_METRICS = MetricNames(
    prefix="vllm:",
    cached_by_source="vllm:prompt_tokens_cached_by_source_total",
    prompt_by_source="vllm:prompt_tokens_by_source_total",
    prefix_cache_queries="vllm:prefix_cache_queries_total",
    prefix_cache_hits="vllm:prefix_cache_hits_total",
    external_prefix_cache_queries="vllm:external_prefix_cache_queries_total",
    external_prefix_cache_hits="vllm:external_prefix_cache_hits_total",
    prompt_tokens="vllm:prompt_tokens_total",
    preemptions="vllm:num_preemptions_total",
    offload_load_bytes="vllm:kv_offload_load_bytes_total",
    offload_store_bytes="vllm:kv_offload_store_bytes_total",
    ttft_count="vllm:time_to_first_token_seconds_count",
    ttft_sum="vllm:time_to_first_token_seconds_sum",
    kv_cache_usage="vllm:kv_cache_usage_perc",
)

_ENDPOINTS = Endpoints(health="/health", metrics="/metrics", models="/v1/models", metric_names=VLLM_METRICS)


@dataclass(frozen=True)
class VllmEngine:
    """vLLM's OpenAI-compatible server."""

    name: str = "vllm"
    endpoints: Endpoints = _ENDPOINTS
    log: VllmLog = VllmLog()
    install: VllmInstall = VllmInstall()

    def render(self, config: EngineConfig) -> RenderedConfig:
        return render_config(config)

    def argv(self, spec: LaunchSpec, config: EngineConfig, port: int) -> list[str]:
        return launch_argv(spec, render_config(config), port)

    def process(
        self,
        spec: LaunchSpec,
        config: EngineConfig,
        log_path: Path,
        *,
        shm_patterns: tuple[str, ...] = (),
    ) -> EngineProcess:
        return EngineProcess(spec, render_config(config), log_path, shm_patterns=shm_patterns)

    def arg_checker(self) -> VllmArgChecker:
        return VllmArgChecker()

    def sizing(
        self, spec: LaunchSpec, config: EngineConfig, platform: Literal["cuda", "cpu"]
    ) -> EngineSizing:
        return sizing_from_argv(self.argv(spec, config, 0)[len(spec.launcher) :], platform)


VLLM = VllmEngine()

# The engines a study file's ``engine:`` names (autotune.studyfile.ENGINES_BY_NAME lists the same names).
ENGINES_BY_NAME: dict[str, VllmEngine] = {"vllm": VLLM}


def engine_named(name: str) -> VllmEngine:
    """The engine a study file names (the study file's own check has refused any other name)."""
    return ENGINES_BY_NAME[name]
