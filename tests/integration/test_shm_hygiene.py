"""Stale host-pool files are removed; a file a live process maps or holds open never is.

Real child processes create and hold files (in a temporary directory passed as ``shm_dir``,
never the real /dev/shm), as vllm-ascend's CPUOffloadingConnector does with cpu_kv_cache_*, and
as any vLLM's processes do with psm_* and sem.mp-* (left behind when the group is SIGKILLed).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.engine import clean_stale_shm
from autotune.engine._shm import ShmSnapshot, clean_new_shm

# Creates the file, then keeps it by a mapping only (fd closed) or by an open fd only.
HOLDER = r"""
import mmap, os, sys, time
path, how = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 1 << 20)
if how == "mmap":
    region = mmap.mmap(fd, 1 << 20)
    region[:4] = b"KV!!"
    os.close(fd)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def _hold(procs: list[subprocess.Popen[str]], path: Path, how: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), how], stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _stop(p: subprocess.Popen[str]) -> None:
    p.kill()
    p.wait(timeout=10)


def _stale(path: Path) -> Path:
    path.write_bytes(b"\0" * 8192)  # what a crashed engine left behind
    return path


def test_stale_pool_file_goes_and_a_held_one_stays_until_its_holder_dies(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    stale = _stale(tmp_path / "cpu_kv_cache_0_0_model.layers.0.self_attn")
    mapped = tmp_path / "cpu_kv_cache_0_1_model.layers.0.self_attn"
    opened = tmp_path / "cpu_kv_cache_0_2_model.layers.0.self_attn"
    other = _stale(tmp_path / "vllm_offload_engine.mmap")  # another pattern: not touched
    mapper = _hold(holders, mapped, "mmap")
    opener = _hold(holders, opened, "fd")

    report = clean_stale_shm(shm_dir=tmp_path)

    assert report.removed == (stale,)
    assert report.kept_in_use == (mapped, opened)
    assert not stale.exists() and mapped.exists() and opened.exists() and other.exists()
    assert report.freed_bytes >= 8192

    _stop(mapper)  # a crashed engine: its mapping is gone, the file is not
    report = clean_stale_shm(shm_dir=tmp_path)
    assert report.removed == (mapped,) and report.kept_in_use == (opened,)
    assert not mapped.exists() and opened.exists()

    _stop(opener)
    assert clean_stale_shm(shm_dir=tmp_path).removed == (opened,)
    assert sorted(tmp_path.iterdir()) == [other]


def test_dry_run_reports_without_removing(tmp_path: Path, holders: list[subprocess.Popen[str]]) -> None:
    stale = _stale(tmp_path / "cpu_kv_cache_0_0_a")
    held = tmp_path / "cpu_kv_cache_0_0_b"
    _hold(holders, held, "mmap")

    report = clean_stale_shm(shm_dir=tmp_path, dry_run=True)

    assert report.removed == (stale,) and report.kept_in_use == (held,)
    assert stale.exists() and held.exists()


def test_several_patterns_as_a_profile_lists_them(tmp_path: Path) -> None:
    ascend = _stale(tmp_path / "cpu_kv_cache_1_0_x")
    native = _stale(tmp_path / "vllm_offload_3f2a.mmap")
    unrelated = _stale(tmp_path / "psm_12345")  # someone else's shared memory

    report = clean_stale_shm(["cpu_kv_cache_*", "vllm_offload_*.mmap"], shm_dir=tmp_path)

    assert report.removed == (ascend, native)
    assert unrelated.exists()


def test_nothing_to_clean_scans_no_process(tmp_path: Path) -> None:
    empty = clean_stale_shm(shm_dir=tmp_path, proc_root=tmp_path / "no-proc-here")
    assert (empty.removed, empty.kept_in_use, empty.skipped) == ((), (), ())
    assert clean_stale_shm(shm_dir=tmp_path / "missing").removed == ()


def test_a_directory_matching_the_pattern_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "cpu_kv_cache_dir").mkdir()
    report = clean_stale_shm(shm_dir=tmp_path)
    assert report.removed == () and [p.name for p, _ in report.skipped] == ["cpu_kv_cache_dir"]
    assert (tmp_path / "cpu_kv_cache_dir").is_dir()


def test_only_files_made_since_the_snapshot_go_and_a_held_one_stays(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    before_engine = _stale(tmp_path / "psm_aaaa0001")  # someone's, from before: not ours to judge
    snapshot = ShmSnapshot.take(tmp_path)

    left = _stale(tmp_path / "psm_bbbb0001")  # a killed engine's segment
    sem = _stale(tmp_path / "sem.mp-x1y2z3")
    unrelated = _stale(tmp_path / "cpu_kv_cache_0_0_a")  # not in the patterns asked for
    held = tmp_path / "vllm_pool_live"
    _hold(holders, held, "mmap")  # a live engine's pool

    assert clean_new_shm(snapshot, dry_run=True).removed == (left, sem)
    report = clean_new_shm(snapshot)

    assert report.removed == (left, sem)
    assert report.kept_in_use == (held,)
    assert sorted(tmp_path.iterdir()) == sorted([before_engine, unrelated, held])
