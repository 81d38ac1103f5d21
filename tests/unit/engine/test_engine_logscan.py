from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import FailureClass
from autotune.engine._logscan import KvCapacity, classify_failure, parse_kv_capacity
from autotune.engine._oomkill import oom_kill_count

CPU_KV_LINE = (
    "(EngineCore pid=3441) INFO 11-29 11:00:50 [kv_cache_utils.py:2327] CPU KV cache size: 32,768 tokens, "
    "Maximum concurrency for 2,048 tokens per request: 16.00x"
)
GPU_KV_LINE = (
    "(EngineCore_DP0 pid=912) INFO 11-29 11:02:10 [kv_cache_utils.py:2327] GPU KV cache size: 857,392 tokens, "
    "Maximum concurrency for 8,192 tokens per request: 104.66x"
)

# What the CPU build prints when the engine core dies at start-up (traceback lines carry the prefix).
_CORE = "(EngineCore pid=3441) ERROR 11-29 11:00:50 [core.py:1099] "


def _engine_core_failure(exception_line: str) -> str:
    return "\n".join(
        [
            "(APIServer pid=3400) INFO 11-29 11:00:41 [api_server.py:1351] vLLM API server version 0.32.0",
            _CORE + "EngineCore failed to start.",
            _CORE + "Traceback (most recent call last):",
            _CORE + '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1090, in run',
            _CORE + "    engine_core = EngineCoreProc(*args, **kwargs)",
            _CORE + exception_line,
            "(APIServer pid=3400) Traceback (most recent call last):",
            "(APIServer pid=3400) RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}",
        ]
    )


def test_cpu_kv_capacity_line_is_read_with_thousands_separators() -> None:
    assert parse_kv_capacity("noise\n" + CPU_KV_LINE + "\nApplication startup complete.\n") == KvCapacity(
        device="CPU", tokens=32768, max_model_len=2048, max_concurrency=16.0
    )


def test_gpu_kv_capacity_line_is_read() -> None:
    assert parse_kv_capacity(GPU_KV_LINE) == KvCapacity(
        device="GPU", tokens=857392, max_model_len=8192, max_concurrency=104.66
    )


def test_the_last_kv_capacity_line_wins() -> None:
    cap = parse_kv_capacity(CPU_KV_LINE + "\n" + GPU_KV_LINE + "\n")
    assert cap is not None
    assert cap.tokens == 857392


def test_no_kv_capacity_line_gives_none() -> None:
    assert parse_kv_capacity("INFO Available KV cache memory: 0.03 GiB\n") is None


@pytest.mark.parametrize(
    ("log", "exit_code", "expected"),
    [
        pytest.param(
            "usage: api_server.py [-h] ...\napi_server.py: error: unrecognized arguments: --swap-space 4\n",
            2,
            FailureClass.BAD_FLAG,
            id="removed-flag",
        ),
        pytest.param(
            "vllm serve: error: argument --block-size: invalid choice: '7' (choose from 1, 8, 16, 32)\n",
            2,
            FailureClass.BAD_FLAG,
            id="argparse-invalid-choice",
        ),
        pytest.param(
            _engine_core_failure(
                "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(multiple_of=32)])."
            ),
            1,
            FailureClass.BAD_FLAG,
            id="cpu-block-size-16",
        ),
        pytest.param(
            _engine_core_failure(
                "ValueError: max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128)."
            ),
            1,
            FailureClass.BAD_FLAG,
            id="batched-tokens-below-seqs",
        ),
        pytest.param(
            _engine_core_failure(
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory "
                "reservation on the CPU backend, despite its name). See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
            ),
            1,
            FailureClass.NO_KV_ROOM,
            id="no-cache-blocks",
        ),
        pytest.param(
            _engine_core_failure(
                "ValueError: To serve at least one request with the model's max seq len (2048), (0.06 GiB KV "
                "cache is needed, which is larger than the available KV cache memory (0.01 GiB). Based on "
                "the available memory, the estimated maximum model length is 336. Try increasing "
                "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
                "`max_model_len` when initializing the engine."
            ),
            1,
            FailureClass.NO_KV_ROOM,
            id="kv-below-max-model-len",
        ),
        pytest.param(
            _engine_core_failure(
                "ValueError: Free memory on device (10.2/79.1 GiB) on startup is less than desired GPU memory "
                "utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                "other processes."
            ),
            1,
            FailureClass.OUT_OF_MEMORY,
            id="free-memory-below-utilization",
        ),
        pytest.param(
            _engine_core_failure(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                "capacity of 139.72 GiB of which 1.06 GiB is free."
            ),
            1,
            FailureClass.OUT_OF_MEMORY,
            id="torch-oom",
        ),
        pytest.param(
            _engine_core_failure("RuntimeError: NCCL error in: ../csrc/distributed.cpp:42"),
            1,
            FailureClass.CRASH,
            id="unrelated-crash",
        ),
        pytest.param("", -9, FailureClass.OUT_OF_MEMORY, id="sigkill"),
        pytest.param("", 137, FailureClass.OUT_OF_MEMORY, id="sigkill-by-shell"),
        pytest.param("usage: ...\n", 2, FailureClass.BAD_FLAG, id="exit-2"),
        pytest.param("", 1, FailureClass.CRASH, id="nothing-known"),
    ],
)
def test_classify_failure(log: str, exit_code: int, expected: FailureClass) -> None:
    assert classify_failure(log, exit_code=exit_code) is expected


def test_timeout_wins_over_whatever_the_log_says() -> None:
    log = CPU_KV_LINE + "\ntorch.OutOfMemoryError: CUDA out of memory\n"
    assert classify_failure(log, exit_code=None, timed_out=True) is FailureClass.STARTUP_TIMEOUT


def test_an_engine_killed_after_a_healthy_start_is_out_of_memory() -> None:
    log = (
        CPU_KV_LINE
        + "\n(APIServer pid=3400) INFO 11-29 11:00:52 [launcher.py:46] Application startup complete.\n"
    )
    assert classify_failure(log, exit_code=-9) is FailureClass.OUT_OF_MEMORY


def test_cpu_offload_on_the_cpu_build_is_a_bad_flag_combination() -> None:
    log = _engine_core_failure(
        "Exception: CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"
    )
    assert classify_failure(log, exit_code=1) is FailureClass.BAD_FLAG


def test_sigkill_is_out_of_memory_only_when_the_oom_kill_count_rose() -> None:
    """The kernel's OOM-kill count decides what a SIGKILL was: unchanged, another process killed
    the engine (not its memory settings); risen, the OOM killer did, also when it killed the
    engine core and the server exited with 1 after it."""
    assert classify_failure("", exit_code=-9, oom_killed=False) is FailureClass.CRASH
    assert classify_failure("", exit_code=137, oom_killed=True) is FailureClass.OUT_OF_MEMORY
    assert classify_failure("", exit_code=-9, oom_killed=None) is FailureClass.OUT_OF_MEMORY  # unknown
    assert classify_failure("", exit_code=1, oom_killed=True) is FailureClass.OUT_OF_MEMORY
    assert classify_failure("", exit_code=1, oom_killed=False) is FailureClass.CRASH


def test_the_oom_kill_count_is_read_from_the_first_readable_source(tmp_path: Path) -> None:
    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 100\noom_kill 7\n")
    assert oom_kill_count([tmp_path / "missing", v1, vmstat]) == 3
    assert oom_kill_count([tmp_path / "missing", vmstat]) == 7
    assert oom_kill_count([tmp_path / "missing"]) is None
