"""The KV estimate against what the real CPU build of vLLM prints at start-up.

Each case starts ``python -m vllm.entrypoints.openai.api_server`` on the tiny model (about
25-35 s on 2 cores with ``--enforce-eager``; the module starts all cases at once, so their
imports overlap), reads the ``CPU KV cache size: N tokens, Maximum concurrency for L tokens per
request: Cx`` line, stops the server's whole process group and compares. Tolerances: exact
(0 tokens) when the KV bytes are given; with the utilization budget (vLLM subtracts its measured
resident size) within ``_AUTO_TOLERANCE_BYTES`` of KV memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from autotune.engine import kernel_fallback_note, sizing_from_argv
from autotune.memory import GiB, ModelShape, cpu_kv_tokens, estimate_memory, read_machine_facts, weight_bytes
from autotune.trial import MemoryGuard
from tests.conftest import wait_no_processes

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

_KV_LINE = re.compile(
    r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
)
_START_TIMEOUT_S = 360.0  # for the three starts at once
# vLLM's resident size when it sizes the KV cache, against the estimate's 768 MiB reserve: 0.62 GiB on
# an idle 2-core host, about 1.04 GiB in a CI run (three engines starting at once beside the other
# pytest worker): 294 MB under the estimate there
_AUTO_TOLERANCE_BYTES = 384 * (1 << 20)


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


@dataclass(frozen=True)
class KvLine:
    """vLLM's ``CPU KV cache size`` line of one start, and that start's log."""

    tokens: int
    max_model_len: int
    concurrency: float
    log: Path


def _start(model: Path, log: Path, mark: str, *flags: str) -> subprocess.Popen[bytes]:
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
        return subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait_kv_line(proc: subprocess.Popen[bytes], log: Path, deadline: float) -> KvLine | str:
    """The KV line once vLLM printed it, or why there is none (the test that reads it fails with it)."""
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if match := _KV_LINE.search(text):
            tokens, length, concurrency = match.groups()
            return KvLine(int(tokens.replace(",", "")), int(length.replace(",", "")), float(concurrency), log)
        if proc.poll() is not None:
            return f"vLLM exited with {proc.returncode} before its KV line:\n{text[-3000:]}"
        time.sleep(0.5)
    return f"no KV cache line within {_START_TIMEOUT_S:.0f} s:\n{log.read_text(errors='replace')[-3000:]}"


_UTILIZATION = 0.3
_CASES: dict[str, tuple[str, ...]] = {
    # binary suffix; length a whole number of blocks; the bf16 model served in float32 (its
    # KV cache too: twice the bytes per token), as the tool reads --dtype from the command
    "64M": ("--max-model-len", "1024", "--kv-cache-memory-bytes", "64M", "--dtype", "float32"),
    "50m": ("--max-model-len", "1000", "--kv-cache-memory-bytes", "50m", "--dtype", "auto"),
    "utilization": ("--max-model-len", "1024", "--gpu-memory-utilization", str(_UTILIZATION)),
}


@pytest.fixture(scope="module")
def kv_lines(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, KvLine | str]]:
    """Every case's vLLM started at once, so that their imports and model loads overlap on the
    cores, each stopped once all printed their KV lines (or failed); none outlives the module.
    A case's value is its KV line or why it has none."""
    root = tmp_path_factory.mktemp("kv")
    mark = uuid.uuid4().hex
    facts = read_machine_facts()
    node_total = facts.node_total or facts.host_total
    node_available = facts.node_available or facts.host_available
    cases = dict(_CASES)
    if _UTILIZATION * node_total > 0.8 * node_available:
        cases.pop("utilization")  # its test skips, saying why
    procs = {name: _start(tiny_model, root / f"{name}.log", mark, *flags) for name, flags in cases.items()}
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        yield {name: _wait_kv_line(proc, root / f"{name}.log", deadline) for name, proc in procs.items()}
    finally:
        for proc in procs.values():  # all asked at once: their shutdowns overlap too
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            _stop(proc)
        left = wait_no_processes(mark)
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.kill()
        assert not left, f"vLLM processes outlived the KV tests: {[p.pid for p in left]}"


def _line(kv_lines: dict[str, KvLine | str], case: str) -> KvLine:
    line = kv_lines[case]
    if isinstance(line, str):
        pytest.fail(line)
    return line


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
    tiny_model: Path,
    kv_lines: dict[str, KvLine | str],
    kv_flag: str,
    kv_bytes: int,
    max_model_len: int,
    dtype: str,
) -> None:
    argv = ["--max-model-len", str(max_model_len), "--kv-cache-memory-bytes", kv_flag, "--dtype", dtype]
    assert tuple(argv) == _CASES[kv_flag]  # the command vLLM was started with
    line = _line(kv_lines, kv_flag)
    tokens, length, concurrency = line.tokens, line.max_model_len, line.concurrency
    guard = MemoryGuard.for_model(str(tiny_model), "cpu")
    assert guard is not None
    shape = guard.served(sizing_from_argv(argv, guard.platform))[0]
    est = guard.check(sizing_from_argv([*argv, "--block-size", "128"], guard.platform)).estimate
    assert est is not None
    print(
        f"vLLM: {tokens:,} tokens, {concurrency:.2f}x; estimate: {est.reported_tokens:,}, {est.max_concurrency:.2f}x"
    )
    assert length == max_model_len
    if dtype == "float32":  # on x86 without AVX-512 too, oneDNN runs float32 linear layers
        assert kernel_fallback_note(line.log.read_text(errors="replace")) is None
    assert tokens == est.reported_tokens
    assert concurrency == pytest.approx(est.max_concurrency, abs=0.005)
    if max_model_len % 128 == 0:
        assert tokens == cpu_kv_tokens(shape, kv_bytes, 128)


# vLLM's own read of the node's memory under a utilization budget (v1/worker/cpu_worker.py)
_AUTO_SET = re.compile(r"Auto set \(([\d.]+)/([\d.]+)\) GiB for KV cache")


def test_utilization_budget_within_tolerance(tiny_model: Path, kv_lines: dict[str, KvLine | str]) -> None:
    """vLLM's KV tokens under a utilization budget (a share of the node's total, less its measured
    resident size) within ``_AUTO_TOLERANCE_BYTES`` of the estimate at the node total vLLM read at its
    start, from its log: on a VM whose memory is hot-plugged (virtio-mem) the node's MemTotal moves,
    and a CI run read 17.09 GiB after the start where this machine reads 18.59."""
    facts = read_machine_facts()
    node_total = facts.node_total or facts.host_total
    if "utilization" not in kv_lines:
        pytest.skip(f"not enough free memory for a {_UTILIZATION} x {node_total / GiB:.1f} GiB budget")
    shape = ModelShape.from_config(tiny_model)
    line = _line(kv_lines, "utilization")
    said = _AUTO_SET.search(line.log.read_text(errors="replace"))
    assert said, "vLLM did not log the node total it sized the KV cache from"
    vllm_total = int(float(said[2]) * GiB)
    est = estimate_memory(
        shape,
        weight_bytes=weight_bytes(tiny_model, shape),
        gpu_total_bytes=vllm_total,
        gpu_memory_utilization=_UTILIZATION,
        max_model_len=1024,
        block_size=128,
        platform="cpu",
    )
    consumed = re.search(
        r"([\d.]+) GiB memory was consumed by non-kv usages", line.log.read_text(errors="replace")
    )
    print(
        f"vLLM: {line.tokens:,} tokens of a {said[2]} GiB node, {consumed[1] if consumed else '?'} GiB not KV; "
        f"estimate: {est.reported_tokens:,} (the node reads {node_total / GiB:.2f} GiB now)"
    )
    tolerance_tokens = _AUTO_TOLERANCE_BYTES // shape.kv_bytes_per_token()
    assert abs(line.tokens - est.reported_tokens) <= tolerance_tokens, (line.tokens, est.reported_tokens)
