"""What an engine inherits and what it leaves (issue 30, items 6 and 7), read from the live
processes: their ``/proc/PID/environ``, the Unix sockets in the temporary folder, /dev/shm.

The fake server is launched exactly as vLLM is (under the guardian, in its own group); one test
starts the real CPU build once, for vLLM's own sockets and processes, from a hostile working
directory, and kills its whole tree (what that leaves in /dev/shm: test_engine_faults.py's question).
"""

from __future__ import annotations

import json  # imported before any test changes directory (trap_dir), like everything the runner uses
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from autotune.engine import EngineProcess, LaunchSpec, clean_leftover_engines
from autotune.engine._launch import CPU_LAUNCHER, parse_engine_args
from autotune.errors import EngineCrashed
from autotune.space import RenderedConfig
from tests.conftest import FAKE_LAUNCHER, FAKE_VLLM, MARK_ENV, REPO, wait_no_processes

assert json and secrets  # loaded from the standard library before any chdir below

STORAGE_PW = "pg-Tenancy-Secret-4711"
PG_PW = "pg-Password-0815"
API_KEY = "sk-tenancy-key-2342"


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_STORAGE", f"postgresql+psycopg://tuner:{STORAGE_PW}@db:5432/tune")
    monkeypatch.setenv("PGPASSWORD", PG_PW)
    monkeypatch.setenv("MY_SERVING_KEY", API_KEY)  # what --api-key-env names


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TMPDIR for this test only (other sessions' engines share /tmp), for autotune and vLLM;
    short, as a socket's path must be (108 bytes)."""
    tmp = Path(tempfile.mkdtemp(prefix="at-", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def _family(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _environ(p: psutil.Process) -> list[bytes]:
    return Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")


def _sockets(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if stat.S_ISSOCK(p.lstat().st_mode)]


def _assert_no_secret(procs: list[psutil.Process]) -> None:
    for p in procs:
        entries = _environ(p)
        raw = b"\0".join(entries)
        who = f"pid {p.pid} {p.cmdline()[:3]}"
        assert STORAGE_PW.encode() not in raw and PG_PW.encode() not in raw, who
        assert b"MY_SERVING_KEY" not in raw and b"AUTOTUNE_STORAGE" not in raw, who
        assert [e for e in entries if API_KEY.encode() in e] in ([b"VLLM_API_KEY=" + API_KEY.encode()], []), (
            who
        )


def test_no_secret_reaches_the_guardian_the_server_or_its_child(
    tmp_path: Path, mark: str, secrets_set: None
) -> None:
    spec = LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_SPAWN_CHILD": "1"},
        api_key=API_KEY,  # as the CLI builds it: the key, not the name of its variable
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    with EngineProcess(spec, RenderedConfig(args=()), tmp_path / "e.log") as eng:
        eng.wait_healthy()
        assert eng.pid is not None
        procs = _family(eng.pid)
        assert len(procs) >= 3, procs  # the guardian, the server, the server's child
        _assert_no_secret(procs)
        server = _environ(procs[1])
        assert b"VLLM_API_KEY=" + API_KEY.encode() in server  # the key itself still arrives


# Binds a Unix socket where vLLM puts its ZMQ IPC sockets (vllm/utils/network_utils.py:
# f"ipc://{VLLM_RPC_BASE_PATH}/{uuid4()}", the base defaulting to the temporary folder), and
# never unlinks it, as vLLM does not.
_SOCKET_MAKER = r"""
import os, socket, tempfile, time, uuid
base = os.environ.get("VLLM_RPC_BASE_PATH", tempfile.gettempdir())
s = socket.socket(socket.AF_UNIX)
s.bind(os.path.join(base, str(uuid.uuid4())))
print("socket " + "bound", flush=True)
time.sleep(600)
"""


def test_ipc_sockets_go_with_the_engines_folder(tmp_path: Path, mark: str, private_tmp: Path) -> None:
    spec = LaunchSpec(
        model="m", launcher=(sys.executable, "-c", _SOCKET_MAKER), env={MARK_ENV: mark}, stop_timeout_s=2
    )
    for _ in range(2):
        eng = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "e.log", startup_stop_grace_s=0.5)
        eng.start()
        _wait_for(eng, "socket bound")
        assert eng.run_dir is not None and len(_sockets(eng.run_dir.path)) == 1
        eng.stop()
    assert _sockets(private_tmp) == []
    assert list(private_tmp.iterdir()) == []  # no runtime folder left either


def _wait_for(eng: EngineProcess, line: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while line not in eng.log_text().split("\n", 1)[-1]:
        assert time.monotonic() < deadline and eng.alive(), eng.log_text()
        time.sleep(0.1)


def _wait_for_text(path: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.1)


def test_a_foreign_unmapped_file_in_dev_shm_survives_a_run_and_the_next_studys_clean_up(
    tmp_path: Path, mark: str, private_tmp: Path
) -> None:
    """Another tenant's psm_* segment (same user, unmapped at the moment: between its steps)
    made before and during the run stays; the engine's own segment goes."""
    shm = Path("/dev/shm")
    before = shm / f"psm_tenant_{mark[:10]}_a"
    before.write_bytes(b"\0" * 4096)
    during = shm / f"psm_tenant_{mark[:10]}_b"
    own_prefix = f"psm_autotune_test_{mark[:10]}_"
    spec = LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_SHM_PREFIX": own_prefix},
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    try:
        eng = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "e.log")
        with eng:
            eng.wait_healthy()
            during.write_bytes(b"\0" * 4096)
            assert eng.pid is not None and eng.run_dir is not None
            _wait_for_text(eng.run_dir.path / "shm-ledger", own_prefix)  # the guardian looks each second
            os.killpg(eng.pid, 9)  # everything at once: the engine's segment is left behind
        assert list(shm.glob(own_prefix + "*")) == []  # stop() removed what the engine made
        assert before.exists() and during.exists()
        clean_leftover_engines()  # what open_study runs before a study
        assert before.exists() and during.exists()
    finally:
        for path in (before, during, *shm.glob(own_prefix + "*")):
            path.unlink(missing_ok=True)


def test_what_a_killed_tool_and_engine_left_is_removed_by_the_next_study_and_only_that(
    tmp_path: Path, mark: str, private_tmp: Path
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    own = shm / "psm_0wn0wn00"
    foreign = shm / "psm_f0re1gn0"
    for path in (own, foreign):
        path.write_bytes(b"\0" * 4096)
    left = private_tmp / f"autotune-vllm-{uuid.uuid4().hex[:8]}"  # as EngineRunDir makes them
    left.mkdir()
    (left / "lock").touch()  # nobody holds it: the tool and the guardian are gone
    (left / "shm-ledger").write_text(f"{own.stat().st_ino} {own}\n")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(left / str(uuid.uuid4())))  # an IPC socket; closed below, the file stays
    report = clean_leftover_engines()
    assert report.removed == (own,)
    assert foreign.exists() and not left.exists()


@pytest.mark.vllm(alongside=True)
def test_real_vllm_from_a_hostile_directory_keeps_its_sockets_and_no_secret_and_killed_leaves_no_shm(
    tmp_path: Path,
    mark: str,
    tiny_model: Path,
    secrets_set: None,
    private_tmp: Path,
    trap_dir: tuple[Path, Path],
) -> None:
    """One start of the real CPU build for two questions: what it inherits and where it keeps its
    sockets (issue 30), and what a SIGKILL of its whole tree leaves (test_engine_faults.py). Started
    from a directory whose ``json.py`` and ``secrets.py`` would leave a marker if any of its processes
    imported them (``trap_dir``, tests/integration/conftest.py)."""
    _, markers = trap_dir
    spec = LaunchSpec(
        model=str(tiny_model),
        launcher=CPU_LAUNCHER,
        fixed_args=parse_engine_args(
            ["--enforce-eager", "--max-model-len=1024", "--kv-cache-memory-bytes=32M"]
        ),
        env={MARK_ENV: mark},
        api_key=API_KEY,
        startup_timeout_s=300,
    )
    assert _sockets(private_tmp) == []
    with EngineProcess(spec, RenderedConfig(args=()), tmp_path / "vllm.log") as eng:
        eng.wait_healthy()
        assert eng.pid is not None and eng.run_dir is not None
        procs = _family(eng.pid)
        assert len(procs) >= 3, procs  # guardian, API server, EngineCore
        _assert_no_secret(procs)
        inside = _sockets(eng.run_dir.path)
        assert inside, "vLLM made no IPC socket in its runtime folder"
        assert [p for p in _sockets(private_tmp) if eng.run_dir.path not in p.parents] == []
        os.killpg(eng.pid, signal.SIGKILL)  # everything at once, as the OOM killer or kill -9 of a tree
        deadline = time.monotonic() + 10
        while eng.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(
            EngineCrashed,
            match=r"vLLM was killed by SIGKILL( \(not by the kernel.s OOM killer: its kill count did not move\))? during the run",
        ):
            eng.check_alive()
    assert list(markers.iterdir()) == []  # nothing of the working directory's ran in any of them
    # A SIGKILLed vLLM 0.32 (CPU) leaves its shm_broadcast segments (psm_*, 160-240 MiB) and
    # multiprocessing semaphores behind; stop() removed them, and its folder with its sockets.
    assert eng.shm_report is not None
    removed = [p.name for p in eng.shm_report.removed]
    assert any(name.startswith("psm_") for name in removed), eng.shm_report
    assert not any(p.exists() for p in eng.shm_report.removed)
    assert _sockets(private_tmp) == [] and list(private_tmp.glob("autotune-vllm-*")) == []


# autotune's stand-in: starts the fake engine, says where its folder is, waits to be killed.
_DRIVER = r"""
import sys, time
from pathlib import Path
from autotune.engine import EngineProcess, LaunchSpec
from autotune.space import RenderedConfig
spec = LaunchSpec(model="fake-model", launcher=(sys.executable, sys.argv[1]), env={sys.argv[2]: sys.argv[3],
    "FAKE_SHM_PREFIX": sys.argv[4]}, startup_timeout_s=20, stop_timeout_s=2)
eng = EngineProcess(spec, RenderedConfig(args=()), Path(sys.argv[5]))
eng.start()
eng.wait_healthy()
print(eng.run_dir.path, flush=True)
time.sleep(600)
"""


def test_when_autotune_is_killed_the_guardian_removes_the_engines_folder_and_segment(
    tmp_path: Path, mark: str, private_tmp: Path
) -> None:
    own_prefix = f"psm_autotune_test_{mark[:10]}_"
    foreign = Path("/dev/shm") / f"psm_tenant_{mark[:10]}_c"
    foreign.write_bytes(b"\0" * 4096)
    args = [str(FAKE_VLLM), MARK_ENV, mark, own_prefix, str(tmp_path / "e.log")]
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert driver.stdout is not None
        folder = Path(driver.stdout.readline().strip())
        assert folder.parent == private_tmp, folder
        _wait_for_text(folder / "shm-ledger", own_prefix)
        driver.kill()  # as kill -9 or the OOM killer: autotune cannot clean up
        driver.wait(timeout=10)
        assert wait_no_processes(mark, timeout=20) == []
        deadline = time.monotonic() + 10
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not folder.exists()
        assert list(Path("/dev/shm").glob(own_prefix + "*")) == []
        assert foreign.exists()
    finally:
        driver.kill()
        foreign.unlink(missing_ok=True)
        for path in Path("/dev/shm").glob(own_prefix + "*"):
            path.unlink()
