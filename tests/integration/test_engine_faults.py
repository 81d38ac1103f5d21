"""Engine faults with real processes: vLLM's real exit status through the guardian, a stop during
start-up, shared memory left by a killed engine, and no code from the working directory in any child.

The "vLLM" here is a few lines of Python launched exactly as vLLM is (the launcher followed by
``--model M --host H --port P``). The real CPU build, started from a hostile directory and killed:
tests/integration/test_engine_tenancy.py (one start for both files' questions).
"""

from __future__ import annotations

import json  # imported here before any test changes directory, like everything the runner uses
import logging
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.engine import EngineProcess, LaunchSpec
from autotune.engine._argcheck import VllmArgChecker
from autotune.engine._oomkill import oom_kill_count
from autotune.errors import EngineArgsError, EngineCrashed, EngineStartError
from autotune.space import RenderedConfig
from tests.conftest import FAKE_LAUNCHER, MARK_ENV

assert json and secrets  # loaded from the standard library before any chdir below


def _spec(mark: str, launcher: tuple[str, ...] = FAKE_LAUNCHER, **env: str) -> LaunchSpec:
    return LaunchSpec(
        model="fake-model",
        launcher=launcher,
        env={MARK_ENV: mark, **env},
        startup_timeout_s=20,
        stop_timeout_s=20,
    )


def _engine(tmp_path: Path, spec: LaunchSpec, **kw: Any) -> EngineProcess:
    return EngineProcess(spec, RenderedConfig(args=()), tmp_path / "vllm.log", **kw)


def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def _printed(eng: EngineProcess) -> list[str]:
    """What "vLLM" printed: the log without its first line, the command (which holds the code)."""
    return eng.log_text().splitlines()[1:]


def _wait_for_line(eng: EngineProcess, text: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in _printed(eng):
        assert time.monotonic() < deadline, f"{text!r} never printed: {eng.log_text()[-500:]}"
        assert eng.alive(), f"exited early: {eng.log_text()[-500:]}"
        time.sleep(0.05)


# -- the guardian reports vLLM's own status ----------------------------------------------------


def test_an_exit_code_reaches_the_failure_message_unchanged(tmp_path: Path, mark: str) -> None:
    vllm = _python("import sys; print('ValueError: the fake engine refuses', flush=True); sys.exit(3)")
    eng = _engine(tmp_path, _spec(mark, vllm))
    with pytest.raises(EngineStartError) as err, eng:
        eng.wait_healthy()
    assert "vLLM exited with code 3 before it was healthy" in str(err.value)
    assert "ValueError: the fake engine refuses" in str(err.value)
    assert "Fatal Python error" not in eng.log_text()  # the guardian's own abort, which hid the code


def test_a_signal_that_killed_vllm_is_named(tmp_path: Path, mark: str) -> None:
    vllm = _python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    eng = _engine(tmp_path, _spec(mark, vllm))
    with pytest.raises(EngineStartError) as err, eng:
        eng.wait_healthy()
    # SIGKILL out of nowhere: the kernel's OOM killer, unless its kill count (readable here or not)
    # says it killed nothing meanwhile: then someone else did, and the memory settings are not blamed
    if oom_kill_count() is None:
        assert "vLLM was killed by SIGKILL before it was healthy" in str(err.value)
        assert err.value.failure == "out_of_memory"
    else:
        assert "vLLM was killed by SIGKILL (not by the kernel's OOM killer" in str(err.value)
        assert err.value.failure == "crash"


def test_the_guardian_leaves_with_vllms_status(tmp_path: Path, mark: str) -> None:
    by_signal = "import os, signal; os.kill(os.getpid(), signal.SIGUSR1)"
    for code, expected in (("raise SystemExit(0)", 0), ("raise SystemExit(3)", 3), (by_signal, -10)):
        eng = _engine(tmp_path, _spec(mark, _python(code)))
        eng.start()
        assert eng._proc is not None
        assert eng._proc.wait(timeout=20) == expected, eng.log_text()
        eng.stop()


def test_a_crash_after_health_names_the_exit_code(tmp_path: Path, mark: str) -> None:
    import httpx

    eng = _engine(tmp_path, _spec(mark, FAKE_CRASH_AFTER="1"))
    with eng:
        eng.wait_healthy()
        body = {"model": "fake-model", "prompt": "a", "max_tokens": 1}
        with httpx.Client(trust_env=False) as c:
            c.post(eng.base_url + "/v1/completions", json=body)
            with pytest.raises(httpx.HTTPError):
                c.post(eng.base_url + "/v1/completions", json=body)
        _wait_until_dead(eng)
        with pytest.raises(EngineCrashed) as err:
            eng.check_alive()
    assert str(err.value).startswith("vLLM exited with code 1 during the run (crash: RuntimeError: fake")
    assert err.value.log_tail.splitlines()[0] == "root cause: RuntimeError: fake engine core died"


def test_vllm_killed_mid_run_is_reported_as_killed(tmp_path: Path, mark: str) -> None:
    eng = _engine(tmp_path, _spec(mark))
    with eng:
        eng.wait_healthy()
        assert eng.pid is not None
        (server,) = psutil.Process(eng.pid).children()  # the guardian's one child: "vLLM"
        server.send_signal(signal.SIGKILL)
        _wait_until_dead(eng)
        with pytest.raises(EngineCrashed) as err:
            eng.check_alive()
    assert "vLLM was killed by SIGKILL" in str(err.value) and "during the run" in str(err.value)
    if oom_kill_count() is not None:  # the kernel killed nothing meanwhile: said, and not blamed on memory
        assert "(not by the kernel's OOM killer: its kill count did not move)" in str(err.value)
        assert err.value.failure == "crash"


def _wait_until_dead(eng: EngineProcess) -> None:
    deadline = time.monotonic() + 10
    while eng.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not eng.alive()


# -- a stop while vLLM is starting -------------------------------------------------------------


def test_a_stop_during_start_up_kills_after_the_short_grace(
    tmp_path: Path, mark: str, caplog: pytest.LogCaptureFixture
) -> None:
    deaf = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('loading', flush=True); "
    )
    spec = _spec(mark, _python(deaf + "time.sleep(60)"))  # never healthy; stop_timeout_s is 20 s
    eng = _engine(tmp_path, spec, startup_stop_grace_s=1.0)
    eng.start()
    _wait_for_line(eng, "loading")
    caplog.set_level(logging.INFO, logger="autotune.engine._process")
    t0 = time.monotonic()
    eng.stop()
    took = time.monotonic() - t0
    assert took < 1.0 + 5.0, took  # the grace, then SIGKILL and at most 5 s until everything is gone
    assert f"stopping vLLM (pid {eng.pid}, starting up): SIGTERM, SIGKILL in 1 s" in caplog.text


def test_a_healthy_engine_gets_the_full_stop_timeout(
    tmp_path: Path, mark: str, caplog: pytest.LogCaptureFixture
) -> None:
    spec = LaunchSpec(**{**_spec(mark, FAKE_IGNORE_SIGTERM="1").__dict__, "stop_timeout_s": 2.0})
    eng = _engine(tmp_path, spec, startup_stop_grace_s=0.1)
    eng.start()
    eng.wait_healthy()
    caplog.set_level(logging.INFO, logger="autotune.engine._process")
    t0 = time.monotonic()
    eng.stop()
    assert time.monotonic() - t0 >= 2.0  # it ignored SIGTERM: killed after 2 s, not after 0.1 s
    assert f"stopping vLLM (pid {eng.pid}): SIGTERM, SIGKILL in 2 s" in caplog.text


# -- shared memory a killed engine leaves ------------------------------------------------------

# Makes segments as vLLM's processes do (mapped while it runs), then waits to be killed.
_SHM_MAKER = r"""
import mmap, os, sys, time
shm = os.environ["FAKE_SHM_DIR"]
regions = []
for name in ("psm_5a1c0de1", "sem.mp-ab12cd34", "vllm_pool_0", "someone_elses_name"):
    fd = os.open(os.path.join(shm, name), os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 1 << 16)
    regions.append(mmap.mmap(fd, 1 << 16))
    os.close(fd)
print("segments made", flush=True)
time.sleep(600)
"""

_HOLDER = r"""
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 1 << 16)
region = mmap.mmap(fd, 1 << 16)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_segments_a_killed_engine_made_are_removed_and_others_stay(
    tmp_path: Path, mark: str, holder: list[subprocess.Popen[str]]
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    older = shm / "psm_0ld0ld00"  # was there before the engine: not its own, even unmapped
    older.write_bytes(b"\0" * 4096)
    spec = _spec(mark, _python(_SHM_MAKER), FAKE_SHM_DIR=str(shm))
    eng = _engine(tmp_path, spec, shm_dir=shm, shm_patterns=("vllm_pool_*",), startup_stop_grace_s=0.5)
    eng.start()
    _wait_for_line(eng, "segments made")
    live = shm / "psm_11fe11fe"  # another program's segment, made meanwhile and mapped
    p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(live)], stdout=subprocess.PIPE, text=True)
    holder.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"

    eng.stop()  # SIGTERM kills the maker: its mappings go, its files stay -- as with vLLM

    assert eng.shm_report is not None
    made = [shm / "psm_5a1c0de1", shm / "sem.mp-ab12cd34", shm / "vllm_pool_0"]
    assert sorted(eng.shm_report.removed) == sorted(made)
    assert (
        eng.shm_report.kept_in_use == ()
    )  # another program's file was never the engine's: not even looked at
    assert sorted(p.name for p in shm.iterdir()) == ["psm_0ld0ld00", "psm_11fe11fe", "someone_elses_name"]


# -- nothing from the working directory runs in a child (trap_dir: tests/integration/conftest.py) --


def test_the_argument_checker_imports_nothing_from_the_working_directory_and_gets_no_secret(
    tmp_path: Path, trap_dir: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, markers = trap_dir
    for name, value in {
        "VLLM_API_KEY": "sk-vllm-secret",
        "PGPASSWORD": "pg-secret",
        "AUTOTUNE_STORAGE": "postgresql://u:pw@db/s",
        "VLLM_CPU_KVCACHE_SPACE": "3",
    }.items():
        monkeypatch.setenv(name, value)
    # "python" for the checker: records its environment, then runs this Python with a stub
    # ``vllm`` that fails at once (the real one takes 10 s to import; see the vllm-marked test).
    stub = tmp_path / "stub"
    (stub / "vllm").mkdir(parents=True)
    (stub / "vllm" / "__init__.py").write_text("raise ImportError('stub vLLM for the test')\n")
    seen_env = tmp_path / "checker.env"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nenv > {seen_env}\nPYTHONPATH={stub} exec {sys.executable} "$@"\n')
    python.chmod(0o755)

    with pytest.raises(EngineArgsError, match="stub vLLM for the test"):
        VllmArgChecker(python=str(python)).start()

    assert list(markers.iterdir()) == []
    env = dict(line.split("=", 1) for line in seen_env.read_text().splitlines() if "=" in line)
    assert not {"VLLM_API_KEY", "PGPASSWORD", "AUTOTUNE_STORAGE"} & env.keys()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3" and env["PYTHONSAFEPATH"] == "1"


def test_an_engine_imports_nothing_from_the_working_directory(
    tmp_path: Path, trap_dir: tuple[Path, Path], mark: str
) -> None:
    _, markers = trap_dir
    # ``python -c`` (like ``python -m``, vLLM's CPU launcher) puts the working directory first.
    vllm = _python("import json, secrets, time; print('imported', flush=True); time.sleep(60)")
    eng = _engine(tmp_path, _spec(mark, vllm), startup_stop_grace_s=0.5)
    with eng:
        _wait_for_line(eng, "imported")
    assert list(markers.iterdir()) == []
