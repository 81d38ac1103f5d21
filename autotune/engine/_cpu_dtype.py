"""vLLM's CPU build on an x86 CPU without native bfloat16: launched in float32, KV sizes doubled.

The x86 CPU build targets AVX-512; without it its linear layers fall back from oneDNN to plain torch
in bfloat16 ("Failed to create oneDNN linear"), many times slower (``make demo`` took 30 min on a
2-core AMD EPYC with AVX2), while in float32 oneDNN runs them. With AVX-512 but neither AVX512_BF16
nor AMX (Ice Lake and older Xeons) bfloat16 runs through conversions, 1.5-1.6x slower than float32
(benchmarks/RESULTS.md, "bfloat16 without AVX512_BF16"). So every command the tool launches
with the CPU build on such a CPU gets ``--dtype float32`` when neither the fixed flags nor the tuned
ones set a ``--dtype``. float32 doubles the KV bytes of a token (``--dtype auto`` serves bfloat16 or
float16 on x86, float32 checkpoints included: ``vllm/config/model.py::_resolve_auto_dtype``), so each
``--kv-cache-memory-bytes`` of that command (fixed or tuned) is doubled: the pool holds the tokens it
was sized for, and the study measures the same capacities as on an AVX-512 host. A ``--kv-cache-dtype``
other than ``auto`` sizes KV itself: then no size is changed. A ``--dtype`` the user fixes (or the
space tunes) leaves the command exactly as given.

The rule is applied where every launched (and dry-run, memory-checked, argument-checked) command is
built, :func:`launch_argv`, so the record, the export and the memory estimate all see the command
that runs. The CPU's flags come from :func:`~autotune.engine._platform.cpu_flags` ($AUTOTUNE_CPU_FLAGS
forces them, e.g. in tests on an AVX-512 machine).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from autotune.engine._launch import LaunchSpec, build_argv
from autotune.engine._platform import cpu_flags, installed_engine, lacks_bf16
from autotune.space import RenderedConfig, flag_pairs

__all__ = ["FLOAT32_KV_SCALE", "float32_argv", "launch_argv", "serves_float32"]

FLOAT32_KV_SCALE = 2  # float32's 4 bytes a value over the 2 of what --dtype auto serves on x86
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)")  # vLLM's human_readable_int


def serves_float32() -> bool:
    """Does the installed vLLM, on this CPU, need float32 to stay on oneDNN's fast path (the CPU
    build, x86 without AVX-512, or AVX-512 without AVX512_BF16 and AMX)? Reads the CPU first: on a
    bfloat16-capable or non-x86 host nothing else is asked."""
    return lacks_bf16(cpu_flags()) and installed_engine().cpu_build


def _flag(tok: str) -> str:
    return tok.partition("=")[0].replace("_", "-")


def _scaled(size: str, factor: int) -> str:
    """``20M`` -> ``40M``, ``1.5g`` -> ``3g``, ``1073741824`` -> ``2147483648``; what vLLM would not
    read stays as given (its parser then says so)."""
    m = _SIZE_RE.fullmatch(size.strip())
    if m is None:
        return size
    number = float(m[1]) * factor
    return (f"{int(number)}" if number.is_integer() else f"{number:g}") + m[2]


def float32_argv(engine_argv: Sequence[str]) -> list[str]:
    """``engine_argv`` (the engine's flags) served in float32: ``--dtype float32`` added and each KV
    byte size doubled, unless a ``--dtype`` is set already (then unchanged)."""
    argv = list(engine_argv)
    names = [_flag(t) for t in argv]
    if "--dtype" in names:
        return argv
    given = {_flag(n): v for n, v in flag_pairs(argv, positional=[])}
    kv_dtype = given.get("--kv-cache-dtype") or "auto"
    if kv_dtype == "auto":
        for i, name in enumerate(names):
            if name != KV_BYTES_FLAG:
                continue
            if "=" in argv[i]:
                argv[i] = (
                    f"{argv[i].partition('=')[0]}={_scaled(argv[i].partition('=')[2], FLOAT32_KV_SCALE)}"
                )
            elif i + 1 < len(argv):
                argv[i + 1] = _scaled(argv[i + 1], FLOAT32_KV_SCALE)
    return [*argv, "--dtype", "float32"]


def launch_argv(spec: LaunchSpec, rendered: RenderedConfig, port: int) -> list[str]:
    """The full command of one configuration, as launched: :func:`build_argv`, served in float32
    where the CPU build needs it (:func:`serves_float32`)."""
    argv = build_argv(spec, rendered, port)
    if not serves_float32():
        return argv
    head = len(spec.launcher)
    return [*argv[:head], *float32_argv(argv[head:])]
