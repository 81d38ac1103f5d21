"""Helm values for vLLM's production-stack chart: one ``servingEngineSpec.modelSpec`` entry per engine.

Read from github.com/vllm-project/production-stack at ``engine._chart.CHART_COMMIT`` (helm/values.yaml,
helm/values.schema.json and helm/templates/deployment-vllm-multi.yaml, which starts an entry's
container as ``vllm serve MODEL_URL --host 0.0.0.0 --port 8000`` followed by the flags below).
The measured command maps as:

- ``--max-model-len``, ``--dtype``, ``--tensor-parallel-size``, ``--max-num-seqs``,
  ``--gpu-memory-utilization``, ``--max-loras`` -> ``vllmConfig.maxModelLen``, ``dtype``,
  ``tensorParallelSize``, ``maxNumSeqs``, ``gpuMemoryUtilization``, ``maxLoras``, when the value has
  the schema's type and Helm writes it back as it was (numbers from 1e-4 up to 1e6: Go prints a
  larger one as ``1e+06``); else the flag stays an extra argument;
- ``--[no-]enable-prefix-caching`` -> ``vllmConfig.enablePrefixCaching``, always written: the chart
  passes ``--no-enable-prefix-caching`` when it is unset, so a command without it (vLLM's default,
  on) is written ``true``; ``--[no-]enable-chunked-prefill`` -> ``enableChunkedPrefill`` when measured;
- ``--enable-lora`` -> ``enableLoRA``; the model -> ``modelURL``; the trial's environment -> ``env``;
- every other flag -> ``vllmConfig.extraArgs`` (strings, as ``vllm serve --config`` expands a file).

The CPU KV-offload pool. The chart's one pool is LMCache's: ``lmcacheConfig.cpuOffloadingBufferSize``
(GB per rank) becomes ``LMCACHE_MAX_LOCAL_CPU_SIZE`` beside the chart's own ``--kv-transfer-config``
with ``LMCacheConnectorV1``. A pool measured with LMCache (the ``cuda-lmcache`` profile's
``lmcache.max_local_cpu_size``) goes there, its other ``lmcache.*`` keys as ``LMCACHE_*`` variables
(LMCache reads both), on the image ``lmcache/vllm-openai`` (LMCache installed). vLLM's native pool
(``--kv-offloading-size`` GiB, OffloadingConnector) and vllm-ascend's (``cpu_swap_space_gb``) stay
in ``extraArgs``: the chart's pool is another connector, and what is deployed is what was measured.
Both keep their pool in /dev/shm (``vllm_offload_*.mmap``, ``cpu_kv_cache_*``), which the chart
mounts only when ``tensorParallelSize`` is set (``shmSize``, default 20Gi): it is then written (1
when not measured) and ``shmSize`` is the pool plus those 20Gi. A pool under 1 GB stays in extraArgs
too: the template drops ``cpuOffloadingBufferSize`` whose integer part is 0.

Resources, which the chart requires: ``requestGPU`` the tensor x pipeline x data parallel size;
``requestMemory`` the engine's measured peak host memory + 20% (at least the pool + 1 GiB), else the
chart's example 16Gi plus the pool; ``requestCPU`` the chart's example 6, not measured. The header
says which.

:func:`helm_values` refuses values that would start anything but the measured command (the chart's
``--host``/``--port`` aside), read back as the template reads them (``engine/_chart.py``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.engine import CHART, CHART_FLAGS, check_entry, go_plain, number
from autotune.errors import ExportError
from autotune.export._yaml import ExportedConfig, config_to_argv

__all__ = ["HELM_DEPLOY", "HelmValuesExporter", "helm_values"]

HELM_DEPLOY = (
    "helm repo add vllm https://vllm-project.github.io/production-stack && "
    "helm install vllm vllm/vllm-stack -f THIS_FILE"
)

# measured flag (as args_to_config keys it) -> vllmConfig field, its type; in the template's order
_FIELDS: dict[str, tuple[str, type]] = {
    "max-model-len": ("maxModelLen", int),
    "dtype": ("dtype", str),
    "tensor-parallel-size": ("tensorParallelSize", int),
    "max-num-seqs": ("maxNumSeqs", int),
    "gpu-memory-utilization": ("gpuMemoryUtilization", float),
    "max-loras": ("maxLoras", int),
}
_SWITCHES = {"enable-chunked-prefill": "enableChunkedPrefill", "enable-prefix-caching": "enablePrefixCaching"}
_ORDER = ("enableChunkedPrefill", "enablePrefixCaching", *CHART_FLAGS, "extraArgs")
_PARALLEL = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")
_SHM_GIB = 20  # the chart's /dev/shm default, kept for what else uses it (NCCL, torch)
_REQUEST_CPU = 6  # the chart's example (helm/values.yaml); not measured
_EXAMPLE_MEMORY_GIB = 16  # the chart's example requestMemory


@dataclass(frozen=True)
class _Pool:
    gib: float  # host memory it takes, all ranks
    in_shm: bool  # kept in /dev/shm
    line: str  # where it went, for the header
    lmcache: Mapping[str, Any] | None = None  # its lmcache.* keys, when lmcacheConfig takes it


def _typed(value: Any, kind: type) -> bool:
    if kind is str:
        return isinstance(value, str)
    if kind is int and not isinstance(value, int):
        return False
    return go_plain(value)


def _pool(config: Mapping[str, Any], ranks: int) -> _Pool | None:
    """The CPU KV-offload pool of a measured config and where it goes (module docstring)."""
    size = config.get("kv-offloading-size")
    if number(size) and size > 0:
        return _Pool(
            float(size), True, f"KV offload pool: --kv-offloading-size {size:g} GiB (vLLM's native "
            "OffloadingConnector) stays in extraArgs: the chart's pool (lmcacheConfig) is LMCache's, another "
            "connector; it lives in /dev/shm, hence tensorParallelSize and shmSize",
        )  # fmt: skip
    transfer = config.get("kv-transfer-config")
    transfer = transfer if isinstance(transfer, dict) else {}
    extra = transfer.get("kv_connector_extra_config")
    extra = extra if isinstance(extra, dict) else {}
    if transfer.get("kv_connector") == "LMCacheConnectorV1" and number(
        extra.get("lmcache.max_local_cpu_size")
    ):
        size = extra["lmcache.max_local_cpu_size"]
        fits = (
            set(transfer) <= {"kv_connector", "kv_role", "kv_connector_extra_config"}
            and transfer.get("kv_role", "kv_both") == "kv_both"
            and all(str(k).startswith("lmcache.") for k in extra)
            and extra.get("lmcache.local_cpu", True) is True
            and size >= 1
            and go_plain(size)
        )
        where = (
            "lmcacheConfig.cpuOffloadingBufferSize (the chart's pool: LMCACHE_MAX_LOCAL_CPU_SIZE)"
            if fits
            else "extraArgs (not the chart's LMCacheConnectorV1 setup, or under 1 GB, which it drops)"
        )
        return _Pool(
            float(size) * ranks, False,
            f"KV offload pool: LMCache's lmcache.max_local_cpu_size {size:g} GB per rank -> {where}",
            dict(extra) if fits else None,
        )  # fmt: skip
    if number(extra.get("cpu_swap_space_gb")):
        size = extra["cpu_swap_space_gb"]
        return _Pool(
            float(size), True, f"KV offload pool: cpu_swap_space_gb {size:g} GiB (vllm-ascend's "
            "CPUOffloadingConnector) stays in extraArgs; it lives in /dev/shm, hence tensorParallelSize and shmSize",
        )  # fmt: skip
    return None


def _image(engine: str | None, lmcache: bool) -> tuple[str, str, list[str]]:
    """(repository, tag, lines): the vLLM release that measured it, on the image the pool needs."""
    found = re.match(r"vllm(?:-[\w]+)? (\d+\.\d+\.\d+)", engine or "")
    notes = []
    if engine and "cpu build" in engine:
        notes.append(
            f"WARNING: measured on {engine}; the chart runs the GPU image: measure on the GPUs you deploy to"
        )
    if lmcache:
        notes.append(
            "image lmcache/vllm-openai:latest (vLLM with LMCache): pin a tag whose vLLM is "
            + (found[1] if found else "the one measured")
        )
        return "lmcache/vllm-openai", "latest", notes
    if found is None:
        return (
            "vllm/vllm-openai",
            "latest",
            [*notes, "the vLLM version was not recorded: pin the image's tag"],
        )
    return "vllm/vllm-openai", f"v{found[1]}", notes


def _memory(peak: int | None, pool: _Pool | None) -> tuple[str, str]:
    pool_gib = math.ceil(pool.gib) if pool is not None else 0
    if peak:
        gib = max(math.ceil(peak * 1.2 / 2**30), pool_gib + 1)
        return (
            f"{gib}Gi",
            f"requestMemory {gib}Gi: the engine's measured peak host memory {peak / 2**30:.1f} GiB + 20%",
        )
    gib = _EXAMPLE_MEMORY_GIB + pool_gib
    why = f" + the {pool_gib} GiB pool" if pool_gib else ""
    return (
        f"{gib}Gi",
        f"requestMemory {gib}Gi: not measured, the chart's example {_EXAMPLE_MEMORY_GIB}Gi{why}",
    )


def _entry(name: str, exported: ExportedConfig) -> tuple[dict[str, Any], list[str]]:
    """The modelSpec entry of one engine and the lines said about it."""
    rest = {k: v for k, v in exported.config.items() if k != "model"}
    tp, pp, dp = (v if isinstance(v := rest.get(k), int) and v > 0 else 1 for k in _PARALLEL)
    gpus = tp * pp * dp
    pool = _pool(rest, tp * pp)  # LMCache's size is per worker: one a GPU of one engine
    vllm = _chart_fields(rest)
    env = dict(exported.env)
    lmcache = _lmcache(rest, pool, env)
    shm: str | None = None
    if pool is not None and pool.in_shm and "tensor-parallel-size" not in rest:
        vllm.setdefault("tensorParallelSize", 1)  # the chart mounts /dev/shm only with it
        shm = f"{math.ceil(pool.gib) + _SHM_GIB}Gi"
    enable_lora = rest.get("enable-lora") is True
    if enable_lora:
        del rest["enable-lora"]
    if rest:
        vllm["extraArgs"] = config_to_argv(rest)
    vllm = {k: vllm[k] for k in _ORDER if k in vllm}  # the template's order
    repository, tag, notes = _image(exported.engine, lmcache is not None)
    memory, memory_line = _memory(exported.host_peak_bytes, pool)
    model = str(exported.config["model"])
    entry: dict[str, Any] = {
        "name": name,
        "repository": repository,
        "tag": tag,
        "modelURL": model,
        "replicaCount": 1,
        "requestCPU": _REQUEST_CPU,
        "requestMemory": memory,
        "requestGPU": gpus,
        **({"shmSize": shm} if shm else {}),
        **({"enableLoRA": True} if enable_lora else {}),
        "vllmConfig": vllm,
        **({"lmcacheConfig": lmcache} if lmcache else {}),
        **({"env": [{"name": k, "value": v} for k, v in env.items()]} if env else {}),
    }
    return entry, notes + _entry_notes(gpus, memory_line, pool, model)


def _chart_fields(rest: dict[str, Any]) -> dict[str, Any]:
    """The flags the chart takes as ``vllmConfig`` fields (switches, and values of the schema's
    type), taken out of ``rest``."""
    vllm: dict[str, Any] = {}
    for flag, field in _SWITCHES.items():
        on, off = rest.get(flag), rest.get("no-" + flag)
        if (on is True) != (off is True) and (on is None or off is None):
            vllm[field] = on is True
            rest.pop(flag, None)
            rest.pop("no-" + flag, None)
    if "enable-prefix-caching" not in rest and "no-enable-prefix-caching" not in rest:
        vllm.setdefault("enablePrefixCaching", True)  # vLLM's default; unset, the chart turns it off
    for flag, (field, kind) in _FIELDS.items():
        if flag in rest and _typed(rest[flag], kind):
            vllm[field] = rest.pop(flag)
    return vllm


def _lmcache(rest: dict[str, Any], pool: _Pool | None, env: dict[str, str]) -> dict[str, Any] | None:
    """The chart's ``lmcacheConfig`` for a pool measured with LMCache (its connector flag taken
    out of ``rest``, its other keys added to ``env``); None for any other pool, or none."""
    if pool is None or pool.lmcache is None:
        return None
    rest.pop("kv-transfer-config")
    lmcache = {"enabled": True, "cpuOffloadingBufferSize": pool.lmcache["lmcache.max_local_cpu_size"]}
    for key, value in pool.lmcache.items():
        if key not in ("lmcache.local_cpu", "lmcache.max_local_cpu_size"):
            env["LMCACHE_" + key.removeprefix("lmcache.").upper()] = _env_text(value)
    return lmcache


def _entry_notes(gpus: int, memory_line: str, pool: _Pool | None, model: str) -> list[str]:
    """What the entry's header says of its resources, its pool and its model."""
    notes = [
        f"requestGPU {gpus}: tensor x pipeline x data parallel size; {memory_line}; requestCPU "
        f"{_REQUEST_CPU}: the chart's example, not measured (set both for your nodes)",
        *([pool.line] if pool is not None else []),
    ]
    if os.path.isabs(model):
        notes.append(
            f"modelURL {model} is a path on the measuring host: mount it there in the pod (a volume), or "
            "export with --model HUB_ID"
        )
    return notes


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return value if isinstance(value, str) else json.dumps(value)


def _names(keys: Sequence[str]) -> list[str]:
    """DNS-1123 labels (the chart names Deployments and Services after them), unique."""
    out: list[str] = []
    for key in keys:
        base = re.sub(r"[^a-z0-9-]+", "-", Path(key).name.lower()).strip("-")[:40].strip("-") or "model"
        name, n = base, 2
        while name in out:
            name, n = f"{base}-{n}", n + 1
        out.append(name)
    return out


def _comment(lines: Sequence[str]) -> list[str]:
    return [f"# {line}" if line else "#" for line in lines]


def helm_values(engines: Mapping[str, ExportedConfig]) -> str:
    """The values.yaml text for ``engines`` (name -> measured config): the lines all engines share
    on top, each entry's own above it. Each entry is checked with :func:`chart_command`."""
    if not engines:
        raise ExportError("nothing to export: no engine")
    exported = list(engines.values())
    common: list[str] = []
    for lines in zip(*(e.lines for e in exported), strict=False):
        if any(line != lines[0] for line in lines):
            break
        common.append(lines[0])
    head = [
        *common,
        f"Helm values for vLLM's production-stack chart ({CHART}): one servingEngineSpec.modelSpec entry "
        "per model, the flags as measured",
    ]
    if len(exported) > 1:
        head.append(
            "measured sharing one server: here each entry is its own pod with requestGPU whole GPUs; each keeps "
            "the --gpu-memory-utilization it was measured with"
        )
    out = [*_comment([*head, "deploy: " + HELM_DEPLOY]), "servingEngineSpec:", "  modelSpec:"]
    for name, e in zip(_names(list(engines)), exported, strict=True):
        entry, notes = _entry(name, e)
        check_entry(
            entry, str(e.config["model"]), config_to_argv({k: v for k, v in e.config.items() if k != "model"})
        )
        body = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False, width=2**20)
        out += ["  " + line for line in (*_comment([*e.lines[len(common) :], *notes]), *body.splitlines())]
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class HelmValuesExporter:
    """``helm-values``: a values.yaml for the production-stack chart. A group adds ``values.yaml``."""

    name: str = "helm-values"
    group_file: str | None = "values.yaml"

    def render(self, engines: Mapping[str, ExportedConfig]) -> str:
        return helm_values(engines)

    def deploy_command(self, exported: ExportedConfig, path: str | Path) -> str:
        return HELM_DEPLOY.replace("THIS_FILE", shlex.quote(str(path)))
