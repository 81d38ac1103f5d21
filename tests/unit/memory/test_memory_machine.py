"""Machine facts through the probe seam: the real system here, and fake readings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autotune.memory import DiskSpace, GiB, MachineProbe, SwapReading, SystemProbe, read_machine_facts


def test_real_machine_reading_is_consistent():
    facts = read_machine_facts()
    assert 0 < facts.host_available <= facts.host_total
    assert facts.swap_used <= facts.swap_total
    if facts.has_gpu:
        assert all(g.total > 0 and g.free <= g.total for g in facts.gpus)
    else:
        assert any(n.startswith("no NVIDIA GPU visible (NVML: ") for n in facts.notes)
    if facts.shm_total is not None:
        assert facts.shm_free is not None and 0 <= facts.shm_free <= facts.shm_total


def test_system_probe_satisfies_the_protocol():
    assert isinstance(SystemProbe(), MachineProbe)


def test_facts_carry_fake_readings(fake_probe, gpu):
    probe = fake_probe(
        gpu_list=[gpu(free=60 * GiB), gpu(free=70 * GiB, index=1)],
        host=(128 * GiB, 100 * GiB),
        node=(64 * GiB, 50 * GiB),
        swaps=[SwapReading(total=8 * GiB, used=GiB, swapped_in=123, swapped_out=456)],
    )
    facts = read_machine_facts(probe)
    assert facts.gpu_count == 2 and facts.gpus[1].free == 70 * GiB
    assert (facts.host_total, facts.host_available) == (128 * GiB, 100 * GiB)
    assert (facts.node_total, facts.node_available) == (64 * GiB, 50 * GiB)
    assert (facts.swap_in_bytes, facts.swap_out_bytes) == (123, 456)
    assert facts.notes == ()


def test_missing_gpu_and_shm_become_notes(fake_probe):
    facts = read_machine_facts(fake_probe(shm_space=None))
    assert not facts.has_gpu
    assert facts.shm_total is None and facts.shm_free is None
    assert facts.notes[0] == "no NVIDIA GPU visible (NVML: fake)"
    assert "/dev/shm" in facts.notes[1]


def test_shm_of_a_missing_mount_is_none(tmp_path):
    assert SystemProbe(shm_path=str(tmp_path / "absent")).shm() is None
    space = SystemProbe(shm_path=str(tmp_path)).shm()
    assert isinstance(space, DiskSpace) and space.total > 0


def test_node_meminfo_is_read_like_vllm(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "Node 0 MemTotal:       8000000 kB\n"
        "Node 0 MemFree:        1000000 kB\n"
        "Node 0 Active(file):    200000 kB\n"
        "Node 0 Inactive(file):  300000 kB\n"
        "Node 0 SReclaimable:     50000 kB\n"
    )
    assert SystemProbe(node_meminfo=str(meminfo)).node_memory() == (8_000_000 * 1024, 1_550_000 * 1024)
    assert SystemProbe(node_meminfo=str(tmp_path / "none")).node_memory() is None


def test_tree_rss_counts_children_and_tolerates_a_gone_process():
    probe = SystemProbe()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        own = probe.tree_rss(os.getpid())
        alone = probe.tree_rss(child.pid)
        assert alone > 0 and own > alone
    finally:
        child.kill()
        child.wait()
    assert probe.tree_rss(child.pid) == 0


def test_a_containers_memory_limit_is_the_host_memory_the_pool_is_cut_from(tmp_path: Path) -> None:
    """A pod limited below its node's memory: the OOM killer acts at the limit, so the host reading
    (and the offload pool's --host-share of it) is the limit and what is left under it."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text(f"{4 * 2**30}\n")
    (v2 / "memory.current").write_text(f"{1 * 2**30}\n")
    node_total, _ = SystemProbe(cgroup=str(tmp_path / "none")).host_memory()
    assert node_total > 4 * 2**30  # every machine this runs on (2-core, 24 GiB CI hosts included)
    total, available = SystemProbe(cgroup=str(v2)).host_memory()
    assert total == 4 * 2**30 and 0 < available <= 3 * 2**30
    (v2 / "memory.max").write_text("max\n")  # cgroup v2 without a limit: the node's memory
    assert SystemProbe(cgroup=str(v2)).host_memory()[0] == node_total
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert SystemProbe(cgroup=str(tmp_path / "v1")).host_memory()[0] == node_total
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * 2**30}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{3 * 2**30}\n")  # over (page cache): nothing left
    assert SystemProbe(cgroup=str(tmp_path / "v1")).host_memory() == (2 * 2**30, 0)
