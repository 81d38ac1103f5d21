"""A machine whose host memory reads low and grows as used (the lent H200 VM read 31 GiB MemTotal at
start for 256 GiB): the offload-pool cap derived from that reading says so, or takes the real size."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from autotune.memory import HOST_MEMORY_ENV, GiB, SystemProbe, read_machine_facts
from autotune.memory import _machine as machine
from autotune.space import load_search_space
from autotune.trial import clamp_space

SPACE = """
name: offload
platform: cuda
parameters:
  kv_offloading_size: {type: categorical, choices: [0, 8, 64, 160], flag: --kv-offloading-size}
"""


def _sysfs(tmp_path: Path, online_blocks: int, *, virtio_mem: bool) -> tuple[str, str]:
    blocks = tmp_path / "memory"
    blocks.mkdir()
    (blocks / "block_size_bytes").write_text("8000000\n")  # 128 MiB, hex as the kernel writes it
    for i in range(online_blocks):
        (blocks / f"memory{i}").mkdir()
        (blocks / f"memory{i}" / "state").write_text("online\n")
    driver = tmp_path / "virtio_mem"
    driver.mkdir()
    if virtio_mem:
        (driver / "virtio4").mkdir()
    return str(blocks), str(driver)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "_first_host_total", [])
    monkeypatch.delenv(HOST_MEMORY_ENV, raising=False)


def test_hot_plugged_memory_is_said(tmp_path: Path) -> None:
    blocks, driver = _sysfs(tmp_path, 8, virtio_mem=True)
    facts = read_machine_facts(SystemProbe(memory_blocks=blocks, virtio_mem=driver))
    assert "hot-plugged as it is used (virtio-mem)" in facts.host_growth


def test_a_balloon_holding_memory_is_said(tmp_path: Path) -> None:
    real_total = read_machine_facts().host_total
    blocks, driver = _sysfs(tmp_path, int(real_total * 2 / (128 * 2**20)), virtio_mem=False)
    facts = read_machine_facts(SystemProbe(memory_blocks=blocks, virtio_mem=driver))
    assert "(a memory balloon)" in facts.host_growth


def test_memtotal_growing_since_start_is_said(tmp_path: Path) -> None:
    blocks, driver = _sysfs(tmp_path, 1, virtio_mem=False)
    probe = SystemProbe(memory_blocks=blocks, virtio_mem=driver)
    total = read_machine_facts(probe).host_total
    assert probe.host_growth(total) == ""  # nothing says this machine grows
    assert "MemTotal grew from" in probe.host_growth(total * 2)


def test_the_user_can_state_the_real_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks, driver = _sysfs(tmp_path, 8, virtio_mem=True)
    before = read_machine_facts(SystemProbe(memory_blocks=blocks, virtio_mem=driver))
    monkeypatch.setenv(HOST_MEMORY_ENV, "4096")
    after = read_machine_facts(SystemProbe(memory_blocks=blocks, virtio_mem=driver))
    assert after.host_total == 4096 * GiB and after.host_growth == ""
    assert after.host_available - before.host_available == pytest.approx(
        4096 * GiB - before.host_total, rel=0.01
    )


def _host_facts(growth: str) -> machine.MachineFacts:
    """A host with 28 of 31 GiB available, no GPU and no swap."""
    return machine.MachineFacts(
        gpus=(),
        host_total=31 * GiB,
        host_available=28 * GiB,
        swap_total=0,
        swap_used=0,
        swap_in_bytes=0,
        swap_out_bytes=0,
        shm_total=None,
        shm_free=None,
        host_growth=growth,
    )


def test_the_offload_cap_says_when_its_reading_may_undercount(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "s.yaml").write_text(SPACE)
    space = load_search_space(tmp_path / "s.yaml")
    facts = _host_facts("memory is hot-plugged as it is used (virtio-mem)")
    with caplog.at_level(logging.WARNING):
        clamped = clamp_space(space, facts, 0.65)
    assert clamped.parameters["kv_offloading_size"].choices == (0, 8)
    assert "may undercount (memory is hot-plugged" in caplog.text and HOST_MEMORY_ENV in caplog.text


ASCEND_POOL = """
name: renamed
platform: ascend
parameters:
  host_pool:
    role: kv_pool
    type: categorical
    choices: [0, 8, 64, 160]
    json_flag: --kv-transfer-config
    json_path: kv_connector_extra_config.cpu_swap_space_gb
"""


def test_the_host_clamp_finds_a_renamed_pool_by_its_role(tmp_path: Path) -> None:
    """A pool that is neither called ``cpu_swap_space_gb`` nor renders ``--kv-offloading-size``
    (vllm-ascend's connector field) is clamped by its role: the clamp knew the name by heart."""
    (tmp_path / "s.yaml").write_text(ASCEND_POOL)
    space = load_search_space(tmp_path / "s.yaml")
    assert clamp_space(space, _host_facts(""), 0.65).parameters["host_pool"].choices == (0, 8)
