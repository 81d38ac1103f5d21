"""The engine supervisor against a fake vLLM launched exactly as vLLM is: start, health, faults, stop."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from autotune.engine import EngineProcess, LaunchSpec
from autotune.engine._launch import parse_engine_args
from autotune.engine._process import port_is_free
from autotune.errors import EngineCrashed, EngineStartError
from autotune.space import RenderedConfig
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, processes_marked


def _spec(mark: str, **env: str) -> LaunchSpec:
    return LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        fixed_args=parse_engine_args(["--max-model-len=1024"]),
        env={MARK_ENV: mark, **env},
        startup_timeout_s=20,
        stop_timeout_s=2,
    )


def test_starts_reads_kv_capacity_and_frees_port(tmp_path: Path, mark: str) -> None:
    eng = EngineProcess(
        _spec(mark), RenderedConfig(args=("--kv-cache-memory-bytes", "16M")), tmp_path / "t.log"
    )
    with eng:
        eng.wait_healthy()
        kv = eng.kv_capacity()
        assert kv is not None and kv.tokens == 16 * 2**20 // 2048 and kv.max_model_len == 1024
        assert eng.startup_s is not None and eng.startup_s < 20
        port = eng.port
        assert not port_is_free(port)
    assert port_is_free(port)
    assert "$ " in (tmp_path / "t.log").read_text().splitlines()[0]  # the command heads the log


@pytest.mark.parametrize(
    ("kind", "failure"),
    [("oom", "out_of_memory"), ("no_kv", "no_kv_room"), ("bad_flag", "bad_flag"), ("crash", "crash")],
)
def test_failed_start_is_classified_with_log_tail(tmp_path: Path, mark: str, kind: str, failure: str) -> None:
    eng = EngineProcess(_spec(mark, FAKE_FAIL_START=kind), RenderedConfig(args=()), tmp_path / "t.log")
    with pytest.raises(EngineStartError) as err, eng:
        eng.wait_healthy()
    assert err.value.failure == failure
    assert err.value.log_tail and str(tmp_path / "t.log") in str(err.value)


def test_startup_timeout_kills_the_engine(tmp_path: Path, mark: str) -> None:
    spec = _spec(mark, FAKE_START_DELAY="30")
    spec = LaunchSpec(**{**spec.__dict__, "startup_timeout_s": 1.5})
    eng = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "t.log")
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as err, eng:
        eng.wait_healthy()
    assert err.value.failure == "startup_timeout"
    assert time.monotonic() - t0 < 15
    assert not processes_marked(mark)


def test_sigterm_ignored_and_children_are_killed(tmp_path: Path, mark: str) -> None:
    spec = _spec(mark, FAKE_IGNORE_SIGTERM="1", FAKE_SPAWN_CHILD="1")
    eng = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "t.log")
    with eng:
        eng.wait_healthy()
        assert len(processes_marked(mark)) >= 2  # server and its child
    assert not processes_marked(mark)


def test_crash_mid_run_is_detected(tmp_path: Path, mark: str) -> None:
    import httpx

    eng = EngineProcess(_spec(mark, FAKE_CRASH_AFTER="1"), RenderedConfig(args=()), tmp_path / "t.log")
    with eng:
        eng.wait_healthy()
        body = {"model": "fake-model", "prompt": "a b c", "max_tokens": 2, "stream": True}
        with httpx.Client(trust_env=False) as c:
            c.post(eng.base_url + "/v1/completions", json=body)
            with pytest.raises(httpx.HTTPError):
                c.post(eng.base_url + "/v1/completions", json=body)
        deadline = time.monotonic() + 5
        while eng.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(EngineCrashed) as err:
            eng.check_alive()
        assert err.value.failure == "crash"


def test_api_key_reaches_engine_by_environment_not_argv(tmp_path: Path, mark: str) -> None:
    spec = LaunchSpec(**{**_spec(mark).__dict__, "api_key": "s3cret-key"})
    eng = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "t.log")
    with eng:
        eng.wait_healthy()
        proc = psutil.Process(eng.pid)
        assert all("s3cret-key" not in a for a in proc.cmdline())
        assert proc.environ().get("VLLM_API_KEY") == "s3cret-key"
    assert "s3cret-key" not in (tmp_path / "t.log").read_text()
