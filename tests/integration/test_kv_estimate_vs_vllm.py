"""The KV estimate against what the real CPU build of vLLM prints at start-up.

Each case starts ``python -m vllm.entrypoints.openai.api_server`` on the tiny model (about
25-35 s on 2 cores with ``--enforce-eager``), reads the ``CPU KV cache size: N tokens,
Maximum concurrency for L tokens per request: Cx`` line, stops the server's whole process
group and compares. Tolerances: exact (0 tokens) when the KV bytes are given; with the
utilization budget (vLLM subtracts its measured resident size) within
``_AUTO_TOLERANCE_BYTES`` of KV memory.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.engine import kernel_fallback_note
from autotune.memory import GiB, ModelShape, cpu_kv_tokens, estimate_memory, read_machine_facts, weight_bytes
from autotune.trial import MemoryGuard

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

_KV_LINE = re.compile(
    r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
)
_START_TIMEOUT_S = 240.0
_AUTO_TOLERANCE_BYTES = 256 * (1 << 20)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End the server and every process it started (they share its process group)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def _kv_line_from_vllm(model: Path, log: Path, mark: str, *flags: str) -> tuple[int, int, float]:
    """Start vLLM, wait for its KV cache line, stop it; (tokens, max_model_len, concurrency)."""
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(_free_port()),
        "--enforce-eager",
        "--block-size",
        "128",
        *flags,
    ]
    # VLLM_CPU_OMP_THREADS_BIND=auto (the default) binds one core and reserves the other on 2 cores.
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "auto",
        "AUTOTUNE_TEST_MARK": mark,
    }
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if match := _KV_LINE.search(text):
                tokens, length, concurrency = match.groups()
                return int(tokens.replace(",", "")), int(length.replace(",", "")), float(concurrency)
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode} before its KV line:\n{text[-3000:]}")
            time.sleep(0.5)
        pytest.fail(
            f"no KV cache line within {_START_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-3000:]}"
        )
    finally:
        _stop(proc)


@pytest.mark.parametrize(
    ("kv_flag", "kv_bytes", "max_model_len", "dtype"),
    [
        # binary suffix; length a whole number of blocks; the bf16 model served in float32 (its
        # KV cache too: twice the bytes per token), as the tool reads --dtype from the command
        ("64M", 64 * (1 << 20), 1024, "float32"),
        ("50m", 50_000_000, 1000, "auto"),  # decimal suffix; 1000 tokens take 8 blocks of 128
    ],
)
def test_explicit_kv_bytes_match_vllm_exactly(
    tiny_model, tmp_path, mark, kv_flag, kv_bytes, max_model_len, dtype
):
    argv = ["--max-model-len", str(max_model_len), "--kv-cache-memory-bytes", kv_flag, "--dtype", dtype]
    tokens, length, concurrency = _kv_line_from_vllm(tiny_model, tmp_path / "vllm.log", mark, *argv)
    guard = MemoryGuard.for_model(str(tiny_model), "cpu")
    assert guard is not None
    shape = guard.served(argv)[0]
    est = guard.check([*argv, "--block-size", "128"]).estimate
    assert est is not None
    print(
        f"vLLM: {tokens:,} tokens, {concurrency:.2f}x; estimate: {est.reported_tokens:,}, {est.max_concurrency:.2f}x"
    )
    assert length == max_model_len
    if dtype == "float32":  # on x86 without AVX-512 too, oneDNN runs float32 linear layers
        assert kernel_fallback_note((tmp_path / "vllm.log").read_text(errors="replace")) is None
    assert tokens == est.reported_tokens
    assert concurrency == pytest.approx(est.max_concurrency, abs=0.005)
    if max_model_len % 128 == 0:
        assert tokens == cpu_kv_tokens(shape, kv_bytes, 128)


def test_utilization_budget_within_tolerance(tiny_model, tmp_path, mark):
    facts = read_machine_facts()
    node_total = facts.node_total or facts.host_total
    node_available = facts.node_available or facts.host_available
    utilization = 0.3
    if utilization * node_total > 0.8 * node_available:
        pytest.skip(f"not enough free memory for a {utilization} x {node_total / GiB:.1f} GiB budget")
    shape = ModelShape.from_config(tiny_model)
    tokens, _, _ = _kv_line_from_vllm(
        tiny_model,
        tmp_path / "vllm.log",
        mark,
        "--max-model-len",
        "1024",
        "--gpu-memory-utilization",
        str(utilization),
    )
    est = estimate_memory(
        shape,
        weight_bytes=weight_bytes(tiny_model, shape),
        gpu_total_bytes=node_total,
        gpu_memory_utilization=utilization,
        max_model_len=1024,
        block_size=128,
        platform="cpu",
    )
    print(
        f"vLLM: {tokens:,} tokens; estimate: {est.reported_tokens:,} (node total {node_total / GiB:.2f} GiB)"
    )
    tolerance_tokens = _AUTO_TOLERANCE_BYTES // shape.kv_bytes_per_token()
    assert abs(tokens - est.reported_tokens) <= tolerance_tokens, (tokens, est.reported_tokens)
