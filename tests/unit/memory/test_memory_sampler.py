"""Measured peaks: a real process tree that allocates, and a fake machine that swaps."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import time

import pytest

from autotune.memory import (
    GiB,
    MemoryPeak,
    MemorySampler,
    SwapReading,
    memory_constraint_violations,
    read_machine_facts,
)

MiB = 1 << 20

# Fills 200 MiB (touched, so resident), says so, and holds it until stdin closes.
_ALLOCATE = textwrap.dedent(
    """
    import sys
    block = bytearray(b"\\x01") * (200 * 1024 * 1024)
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def _hold_until_sampled(proc: subprocess.Popen[str], sampler: MemorySampler) -> None:
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    before = sampler.result().samples
    deadline = time.monotonic() + 10
    while sampler.result().samples < before + 2:  # two readings while the memory is held
        assert time.monotonic() < deadline, "the sampler stopped sampling"
        time.sleep(0.01)
    proc.stdin.close()
    proc.wait(timeout=30)


def test_peak_rss_of_a_child_that_allocates():
    proc = subprocess.Popen(
        [sys.executable, "-c", _ALLOCATE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    with MemorySampler(proc.pid, interval=0.05) as sampler:
        _hold_until_sampled(proc, sampler)
    peak = sampler.result()
    assert peak.rss_peak >= 200 * MiB
    assert peak.samples >= 3 and peak.duration_s > 0


def test_peak_rss_includes_grandchildren_and_survives_their_exit():
    # A parent that runs the allocating child: the 200 MiB sit two levels below the root pid.
    parent_code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {_ALLOCATE!r}])"
    proc = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    with MemorySampler(proc.pid, interval=0.05) as sampler:
        _hold_until_sampled(proc, sampler)  # the tree vanishes while sampling goes on
    assert sampler.result().rss_peak >= 200 * MiB


def test_swap_during_the_run_is_a_violation(fake_probe):
    probe = fake_probe(
        swaps=[
            SwapReading(total=8 * GiB, used=0, swapped_in=10 * MiB, swapped_out=0),
            SwapReading(total=8 * GiB, used=GiB, swapped_in=74 * MiB, swapped_out=512 * MiB),
        ]
    )
    with MemorySampler(1, probe, interval=0.01) as sampler:
        pass
    peak = sampler.result()
    assert (peak.swap_in_bytes, peak.swap_out_bytes) == (64 * MiB, 512 * MiB)
    facts = read_machine_facts(fake_probe())
    (reason,) = memory_constraint_violations(peak, facts)
    assert reason.startswith("the host swapped during the run (64.0 MiB in, 512.0 MiB out)")
    assert memory_constraint_violations(peak, facts, allow_swap=True) == ()


def test_quiet_run_has_no_violation(fake_probe, gpu):
    probe = fake_probe(gpu_list=[gpu(free=10 * GiB)], rss=4 * GiB)
    with MemorySampler(1, probe, interval=0.01) as sampler:
        pass
    peak = sampler.result()
    assert peak.gpu_used_peak == (probe.gpu_list[0].used,)
    assert peak.shm_used_peak == 2 * GiB and peak.rss_peak == 4 * GiB
    assert memory_constraint_violations(peak, read_machine_facts(probe)) == ()


def test_gpu_at_its_physical_total_and_host_full_are_violations(fake_probe):
    facts = read_machine_facts(fake_probe(host=(64 * GiB, 48 * GiB)))
    peak = MemoryPeak(
        gpu_used_peak=(80 * GiB - 100 * MiB, 40 * GiB),
        gpu_total=(80 * GiB, 80 * GiB),
        rss_peak=62 * GiB,
        swap_in_bytes=0,
        swap_out_bytes=0,
        shm_used_peak=None,
        samples=10,
        duration_s=5.0,
    )
    reasons = memory_constraint_violations(peak, facts)
    assert reasons[0] == "GPU 0 peaked at 79.90 GiB of its 80.00 GiB: it ran out of memory"
    assert "62.00 GiB resident, 97% of the host's 64.00 GiB" in reasons[1]
    assert len(reasons) == 2


def test_memory_peak_is_frozen():
    peak = MemoryPeak((), (), 0, 0, 0, None, 0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        peak.rss_peak = 1  # type: ignore[misc]


def test_sampler_rejects_a_bad_interval_and_a_second_start(fake_probe):
    with pytest.raises(ValueError):
        MemorySampler(1, fake_probe(), interval=0)
    sampler = MemorySampler(1, fake_probe(), interval=0.01)
    sampler.start()
    with pytest.raises(RuntimeError):
        sampler.start()
    sampler.stop()
