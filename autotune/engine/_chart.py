"""The production-stack chart read back: what its template starts for a ``modelSpec`` entry.

:func:`chart_command` follows helm/templates/deployment-vllm-multi.yaml at :data:`CHART_COMMIT`: the
container runs ``vllm serve MODEL_URL --host 0.0.0.0 --port 8000``, then ``--enable-lora``, the
``vllmConfig`` fields as flags (``--[no-]enable-chunked-prefill`` when set, ``--[no-]enable-prefix-caching``
always), ``extraArgs``, ``--revision``, and with ``lmcacheConfig.enabled`` its own
``--kv-transfer-config`` (LMCacheConnectorV1) and ``LMCACHE_*`` variables. Helm reads every YAML number
as a float64 and the template writes it with Go's ``%v``: 1048576 becomes ``1.048576e+06``.
:func:`check_entry` holds an entry against the command the study measured. It lives in ``engine/``
because the chart is vLLM's own deployment: its template spells vLLM's flags.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeGuard

from autotune.engine._config_file import typed_value
from autotune.errors import ExportError
from autotune.space import flag_pairs

__all__ = ["CHART", "CHART_COMMIT", "CHART_FLAGS", "chart_command", "check_entry", "go_plain", "number"]

CHART_COMMIT = "a6c01db05f65f556235413ba8dbcfb0c01132fff"
CHART = f"github.com/vllm-project/production-stack, helm/ at {CHART_COMMIT[:7]}"
# vllmConfig field -> the flag the template writes (its spelling), in its order
CHART_FLAGS = {
    "maxModelLen": "--max-model-len",
    "dtype": "--dtype",
    "tensorParallelSize": "--tensor-parallel-size",
    "maxNumSeqs": "--max-num-seqs",
    "gpuMemoryUtilization": "--gpu_memory_utilization",
    "maxLoras": "--max_loras",
    "runner": "--runner",
    "convert": "--convert",
}

_CHART_LMCACHE_ENV = ("LMCACHE_USE_EXPERIMENTAL", "LMCACHE_LOG_LEVEL")  # set by the chart, not a config key


def number(value: object) -> TypeGuard[int | float]:
    """A YAML number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def go_plain(value: Any) -> bool:
    """Whether Helm (Go's %v of a float64) writes this number back as Python wrote it."""
    return number(value) and (value == 0 or 1e-4 <= abs(value) < 1e6)


def _go_text(value: Any) -> str:
    """A value as the template's ``quote`` writes it: Go's %v (YAML numbers are float64 in Helm)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if not number(value):
        return str(value)
    text = repr(float(value))  # the shortest digits, as Go's
    if go_plain(value):
        return text.removesuffix(".0")
    _, digits, exp = Decimal(text).normalize().as_tuple()
    power = len(digits) - 1 + int(exp)
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if value < 0 else ''}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"


def chart_command(entry: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment the chart's template gives an entry's vLLM container (the keys
    the exporter writes, and ``runner``/``convert``/``modelRevision``; the chart's fixed variables
    such as ``PYTHONHASHSEED`` aside)."""
    argv = ["vllm", "serve", str(entry["modelURL"]), "--host", "0.0.0.0", "--port", "8000"]
    if entry.get("enableLoRA"):
        argv.append("--enable-lora")
    vllm = entry.get("vllmConfig") or {}
    if vllm:
        if "enableChunkedPrefill" in vllm:
            argv.append(("--" if vllm["enableChunkedPrefill"] else "--no-") + "enable-chunked-prefill")
        argv.append(("--" if vllm.get("enablePrefixCaching") else "--no-") + "enable-prefix-caching")
        for field, flag in CHART_FLAGS.items():
            if field in vllm:
                argv += [flag, _go_text(vllm[field])]
        argv += [str(a) for a in vllm.get("extraArgs") or []]
    if entry.get("modelRevision"):
        argv += ["--revision", str(entry["modelRevision"])]
    env = {str(e["name"]): str(e["value"]) for e in entry.get("env") or []}
    lmcache = entry.get("lmcacheConfig") or {}
    if lmcache.get("enabled"):
        role = lmcache.get("kvRole", "kv_both")
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": role})]
        env.update(LMCACHE_USE_EXPERIMENTAL="True", VLLM_RPC_TIMEOUT="1000000")
        env["LMCACHE_LOG_LEVEL"] = str(lmcache.get("logLevel", "INFO"))
    size = lmcache.get("cpuOffloadingBufferSize")
    if size is not None and int(float(size)) > 0:
        env.update(LMCACHE_LOCAL_CPU="True", LMCACHE_MAX_LOCAL_CPU_SIZE=_go_text(size))
    return argv, env


def _env_value(text: str) -> Any:
    return {"True": True, "False": False}.get(text, typed_value(text))


def _floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    return float(value) if number(value) else value


def _flags(argv: Sequence[str]) -> Counter[tuple[str, str | None]]:
    """Flags as vLLM reads them; a JSON flag's numbers by value (its reader takes 24 as 24.0)."""
    out: Counter[tuple[str, str | None]] = Counter()
    for n, v in flag_pairs(argv):
        typed = None if v is None else typed_value(v)
        text = json.dumps(_floats(typed) if isinstance(typed, dict) else typed, sort_keys=True)
        out[(n.replace("_", "-"), None if v is None else text)] += 1
    return out


def _started(entry: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(model, flags) the chart starts for ``entry``, its LMCache variables folded back into the
    ``lmcache.*`` keys of its ``--kv-transfer-config`` (as they were measured)."""
    argv, env = chart_command(entry)
    flags = [tok for n, v in flag_pairs(argv[3:]) if n not in ("--host", "--port") for tok in (n, v) if tok]
    lmcache = {
        "lmcache." + k.removeprefix("LMCACHE_").lower(): _env_value(v)
        for k, v in env.items()
        if k.startswith("LMCACHE_") and k not in _CHART_LMCACHE_ENV
    }
    if lmcache and "--kv-transfer-config" in flags:
        i = flags.index("--kv-transfer-config") + 1
        flags[i] = json.dumps({**json.loads(flags[i]), "kv_connector_extra_config": lmcache})
    return argv[2], flags


def check_entry(entry: Mapping[str, Any], measured_model: str, measured: Sequence[str]) -> None:
    """ExportError unless the chart starts ``entry`` as ``measured_model`` with the flags ``measured``
    were measured: the same model and flags as vLLM reads them, less the chart's ``--host``/``--port``
    and the defaults the exporter writes out (``--enable-prefix-caching``, ``--tensor-parallel-size 1``)."""
    model, flags = _started(entry)
    got, want = _flags(flags), _flags(measured)
    if not any(n in ("--enable-prefix-caching", "--no-enable-prefix-caching") for n, _ in want):
        got -= Counter({("--enable-prefix-caching", None): 1})  # vLLM's default, written out
    if not any(n == "--tensor-parallel-size" for n, _ in want):
        got -= Counter({("--tensor-parallel-size", "1"): 1})  # the default, for the /dev/shm mount
    if model != measured_model or got != want:
        raise ExportError(
            f"the Helm values of {entry['name']} would start {model} {shlex.join(flags)} instead of the measured "
            f"{measured_model} {shlex.join(measured)}; nothing was written"
        )
