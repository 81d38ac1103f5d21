"""GPU leases: one holder per device, all or none, named when refused, reclaimed when the holder dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from autotune.engine import GpuLease
from autotune.engine._lease import LEASE_ENV, lease_holders
from autotune.errors import StudyBusyError

HOLD = """
import sys, time, subprocess, os
from pathlib import Path
from autotune.engine import GpuLease
lease = GpuLease([int(g) for g in sys.argv[2].split(",")], owner="test holder", directory=Path(sys.argv[1])).acquire()
if len(sys.argv) > 3:  # an 'engine' started under the lease, in its own group, as EngineProcess does
    env = {**os.environ, **lease.env()}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)
    print(child.pid, flush=True)
print("held", flush=True)
time.sleep(600)
"""


def _holder(tmp_path: Path, gpus: str, *, engine: bool = False) -> tuple[subprocess.Popen[str], int | None]:
    argv = [sys.executable, "-c", HOLD, str(tmp_path), gpus] + (["engine"] if engine else [])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    child = int(p.stdout.readline()) if engine else None
    assert p.stdout.readline().strip() == "held"
    return p, child


def test_a_held_gpu_is_refused_naming_its_holder_and_freed_on_release(tmp_path: Path) -> None:
    first = GpuLease([1], owner="study s worker 1", directory=tmp_path).acquire()
    with pytest.raises(StudyBusyError, match=rf"GPU 1 is leased by pid {os.getpid()} \(study s worker 1"):
        GpuLease([1], directory=tmp_path).acquire()
    holder = lease_holders([0, 1], tmp_path)
    assert holder[0] is None and holder[1] is not None and holder[1].pid == os.getpid()
    first.release()
    assert lease_holders([1], tmp_path)[1] is None
    with GpuLease([1], directory=tmp_path) as again:
        assert again.reclaimed == ()  # a clean release leaves nothing to reclaim
    assert (tmp_path / "gpu1.lock").read_text() == ""


def test_a_group_is_leased_whole_or_not_at_all(tmp_path: Path) -> None:
    with GpuLease([1], directory=tmp_path):
        with pytest.raises(StudyBusyError, match="GPU 1"):
            GpuLease([0, 1], directory=tmp_path).acquire()
        assert lease_holders([0], tmp_path)[0] is None  # GPU 0 was given back when GPU 1 was refused
        with GpuLease([0, 2], directory=tmp_path) as other:
            data = json.loads((tmp_path / "gpu2.lock").read_text())
            assert data["gpus"] == [0, 2] and data["pid"] == os.getpid() and data["token"] == other.token
            assert other.env() == {LEASE_ENV: other.token}


def test_the_lease_of_a_killed_holder_is_reclaimed(tmp_path: Path) -> None:
    p, _ = _holder(tmp_path, "0,1")
    with pytest.raises(StudyBusyError, match=rf"pid {p.pid} \(test holder"):
        GpuLease([0], directory=tmp_path).acquire()
    p.kill()
    p.wait()
    with GpuLease([0, 1], directory=tmp_path) as lease:
        assert {h.pid for h in lease.reclaimed} == {p.pid}
        assert {h.gpu for h in lease.reclaimed} == {0, 1}


def test_reclaiming_stops_what_the_dead_holder_left_running_on_the_gpu(tmp_path: Path) -> None:
    """A worker killed mid-trial leaves its engine to its guardian for a few seconds; the next holder
    of the GPU must not start an engine beside it: it waits, then kills its group."""
    p, engine = _holder(tmp_path, "3", engine=True)
    assert engine is not None and psutil.pid_exists(engine)
    p.kill()
    p.wait()
    t0 = time.monotonic()
    with GpuLease([3], directory=tmp_path).acquire(settle_s=1.0) as lease:
        assert lease.reclaimed[0].pid == p.pid
        assert time.monotonic() - t0 >= 1.0
        assert not psutil.pid_exists(engine) or psutil.Process(engine).status() == psutil.STATUS_ZOMBIE


def test_no_gpus_no_lease(tmp_path: Path) -> None:
    with GpuLease([], directory=tmp_path) as lease:
        assert lease.held and lease.env() == {}
    assert list(tmp_path.iterdir()) == []


def test_a_holder_stopped_by_sigterm_releases_too(tmp_path: Path) -> None:
    p, _ = _holder(tmp_path, "5")
    p.send_signal(signal.SIGTERM)
    p.wait()
    with GpuLease([5], directory=tmp_path):
        pass
