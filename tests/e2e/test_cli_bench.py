"""``autotune bench`` against a server someone else started (the fake vLLM, started here by the test):
the figures of a trial, a JSON record that ``compare`` reads, nothing started or stopped, and every
refusal (401, no such model, unreachable, a proxy in the environment) one line with exit 2 (issue 36)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from autotune.cli import app, main
from autotune.engine import EngineProcess
from autotune.study import TrialRecord, TrialStatus
from tests.conftest import FAKE_LAUNCHER, MARK_ENV
from tests.e2e.test_cli import _good_workload

KEY = "sk-bench-test-key-7"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens


@dataclass(frozen=True)
class Served:
    base_url: str


@contextmanager
def _server(tmp_path: Path, mark: str, **env: str) -> Iterator[Served]:
    """The fake vLLM serving model ``tiny``, started by the test as someone else's server: a plain
    process that autotune's own registry of engines (stopped on an error) does not know."""
    port = _closed_port()
    argv = [*FAKE_LAUNCHER, "--model", "tiny", "--port", str(port)]
    with (tmp_path / "fake.log").open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, MARK_ENV: mark, **env}
        )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=1.0, trust_env=False).status_code == 200:
                    break
            assert proc.poll() is None, (tmp_path / "fake.log").read_text()
            time.sleep(0.05)
        yield Served(url)
    finally:
        proc.kill()
        proc.wait()


def _bench(argv: list[str]) -> int:
    """``autotune bench ...`` in this process, as the console script runs it; its exit code."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        main(["bench", *argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:  # main() installs process-wide signal handlers
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return 0


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _forbid_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, any process autotune would start (an engine, the argument checker) fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"autotune bench started a process: {args[1:2]}")

    monkeypatch.setattr(EngineProcess, "start", refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture
def no_engine_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_processes(monkeypatch)


def test_bench_reports_a_trials_figures_and_writes_a_record_compare_reads(
    tmp_path: Path, mark: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wl = _good_workload(tmp_path / "w.jsonl", n=8)
    out = tmp_path / "bench.json"
    with _server(tmp_path, mark) as proc:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy that answers nothing: never used
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
        _forbid_processes(monkeypatch)
        argv = ["--url", proc.base_url + "/v1", "-w", str(wl), "--slo", "ttft_p90=5s", "--json-out", str(out)]
        assert _bench(argv) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out
        assert httpx.get(proc.base_url + "/health", trust_env=False).status_code == 200  # not stopped
    for row in (
        "TTFT",
        "TPOT",
        "ITL",
        "E2EL",
        "8 completed, 0 failed",
        "goodput",
        "SLO ttft_p90 <= 5000 ms: held",
    ):
        assert row in printed, printed
    assert "schedule lag: p99" in printed and "GPU hits" in printed and "host (CPU pool) hits" in printed
    data = json.loads(out.read_text())
    rec = TrialRecord.from_attrs(data)  # the study's own record schema
    assert rec.status is TrialStatus.OK and rec.figures is not None and rec.figures.completed == 8
    for name in ("ttft_p50", "ttft_p90", "tpot_p50", "itl_p90", "e2el_p99", "output_throughput", "goodput"):
        assert rec.figures.get(name) is not None, name
    assert rec.metrics is not None and rec.metrics.prefix_hit_rate is not None
    assert set(rec.timings_s) == {"warmup", "measure"} and rec.command == ()
    assert data["bench"]["kind"] == "autotune-bench" and data["bench"]["model"] == "tiny"
    assert data["bench"]["url"] == proc.base_url and data["bench"]["server_version"] == "0.0.0-fake"

    res = CliRunner().invoke(app, ["compare", "--baseline-config", str(out), "--config", str(out)])
    assert res.exit_code == 0, res.output
    assert "recorded measurements" in res.output and "ttft_p90" in res.output and "1.00x" in res.output


def test_bench_takes_the_key_from_the_environment_and_never_records_it(
    tmp_path: Path, mark: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wl = _good_workload(tmp_path / "w.jsonl", n=4)
    out = tmp_path / "bench.json"
    with _server(tmp_path, mark, FAKE_REQUIRE_KEY="1", FAKE_EXPECTED_KEY=KEY) as proc:
        url = proc.base_url
        assert _bench(["--url", url, "-w", str(wl)]) == 2
        line = _one_line(capsys.readouterr().err)
        assert url in line and "HTTP 401" in line and "fix: --api-key-env NAME" in line
        monkeypatch.setenv("BENCH_KEY", "not-the-key")
        assert _bench(["--url", url, "-w", str(wl), "--api-key-env", "BENCH_KEY"]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "refused the key in $BENCH_KEY" in line and "not-the-key" not in line
        monkeypatch.setenv("BENCH_KEY", KEY)
        assert (
            _bench(["--url", url, "-w", str(wl), "--api-key-env", "BENCH_KEY", "--json-out", str(out)]) == 0
        )
        printed = capsys.readouterr()
    assert "4 completed, 0 failed" in printed.out
    assert KEY not in out.read_text() + printed.out + printed.err


def test_a_model_the_server_does_not_serve_is_one_line_naming_the_one_it_does(
    tmp_path: Path, mark: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wl = _good_workload(tmp_path / "w.jsonl", n=2)
    with _server(tmp_path, mark) as proc:
        _forbid_processes(monkeypatch)
        assert _bench(["--url", proc.base_url, "-w", str(wl), "--model", "llama-70b"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert proc.base_url in line and "serves no model 'llama-70b' (it serves tiny)" in line
    assert "fix: --model tiny" in line


def test_an_unreachable_server_is_one_line_and_says_a_proxy_was_not_used(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_engine_starts: None,
) -> None:
    wl = _good_workload(tmp_path / "w.jsonl", n=2)
    url = f"http://127.0.0.1:{_closed_port()}"
    assert _bench(["--url", url, "-w", str(wl)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--url {url}: cannot connect" in line and "fix: start the server" in line
    monkeypatch.setenv("https_proxy", "http://user:secret@proxy.example:3128")
    assert _bench(["--url", url, "-w", str(wl)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "https_proxy is set but not used" in line and "secret" not in line


def test_usage_errors_exit_2() -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["bench", "-w", "x.jsonl"])
    assert missing.exit_code == 2 and "--url" in missing.output
    typo = runner.invoke(app, ["bench", "--url", "http://127.0.0.1:1", "--concurrency", "zero"])
    assert typo.exit_code == 2 and "--concurrency" in typo.output


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--rate", "2", "--concurrency", "4"], "--rate and --concurrency exclude each other"),
        (["--passes", "0"], "--passes"),
        (["--slo", "ttft_p90=fast"], "--slo: cannot read 'ttft_p90=fast'"),
        (["--api-key-env", "NO_SUCH_BENCH_VAR"], "environment variable NO_SUCH_BENCH_VAR is not set"),
    ],
)
def test_bad_options_are_one_line_exit_2_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str, no_engine_starts: None
) -> None:
    wl = _good_workload(tmp_path / "w.jsonl", n=2)
    assert _bench(["--url", f"http://127.0.0.1:{_closed_port()}", "-w", str(wl), *extra]) == 2
    assert said in _one_line(capsys.readouterr().err)


def test_compare_refuses_a_recorded_measurement_against_a_config_to_measure(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.yaml").write_text("max-num-seqs: 8\n")
    res = CliRunner().invoke(
        app, ["compare", "--baseline-config", str(tmp_path / "a.json"), "--config", str(tmp_path / "b.yaml")]
    )
    assert res.exit_code != 0 and "compared with each other only" in str(res.exception)
