"""Capacity at an SLO through the CLI on the fake server (issue 45): the fake serves one request at a
time (FAKE_SERIAL=1), so its capacity is one over its service time, and a starved KV pool (below 16M)
makes that three times longer. A night of ``--objective capacity`` must bracket each trial, find the
larger pool's higher capacity, confirm it against the deployed baseline and promote it with the
capacity line in the header and the curves in the night's report (the study, its A B A B and its
export on real vLLM: tests/integration/test_capacity_study_vllm.py); ``bench --capacity`` brackets a
running fake without restarting it. Bad input is one line and exit 2 before any engine starts.
Nothing here is a measurement of vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO

SPACE = (
    "name: s\nplatform: cpu\nparameters:\n"
    "  kv_cache_memory_bytes: {role: kv_bytes, type: categorical, choices: [64], format: '{}M', "
    "flag: --kv-cache-memory-bytes}\n"
)


def _workload(path: Path, n: int = 40, step: float = 0.1) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps({"prompt": f"q{i} " + "word " * 20, "max_tokens": 4, "timestamp": i * step}) + "\n"
            )
    return path


def _autotune(
    tmp_path: Path, mark: str, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    # the fake's modelled time to first token x6: about 50 ms a request (20 req/s served one at a time),
    # 150 ms with a starved pool (under 7 req/s)
    env = {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_SERIAL": "1", "FAKE_TTFT_SCALE": "6"}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _run(tmp_path: Path, mark: str, *extra: str) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    (tmp_path / "space.yaml").write_text(SPACE)
    return _autotune(
        tmp_path, mark,
        "run", "--workload", str(_workload(tmp_path / "w.jsonl", n=30, step=0.2)), "--model", str(model),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--space", str(tmp_path / "space.yaml"),
        "--baseline-arg=--kv-cache-memory-bytes=8M", "--study", "cap", "--out", str(tmp_path / "best.yaml"),
        *extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (("--objective", "capacity"), "--objective capacity needs at least one --slo"),
        (("--objective", "capacity", "--slo", "ttft_p90=1s", "--concurrency", "4"), "closed loop"),
        (
            ("--objective", "capacity", "--slo", "ttft_p90=1s", "--capacity-tolerance", "2"),
            "--capacity-tolerance: 2",
        ),
        (("--objective", "capacity", "--slo", "ttft_p90=1s", "--sample", "5"), "too few to bracket"),
    ],
)
def test_bad_capacity_input_is_one_line_and_exit_2_before_any_engine(
    tmp_path: Path, mark: str, extra: tuple[str, ...], fragment: str
) -> None:
    res = _run(tmp_path, mark, *extra)
    assert res.returncode == 2, res.stderr
    assert fragment in res.stderr and "fix:" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "studies" / "cap").exists() or not list(
        (tmp_path / "studies" / "cap").glob("trial-*")
    )


def test_bench_capacity_brackets_a_running_server_without_restarting_it(tmp_path: Path, mark: str) -> None:
    # one request at a time, 150 ms each: under 7 req/s served, against 5 req/s offered at 1x
    env = {
        **os.environ,
        MARK_ENV: mark,
        "FAKE_SERIAL": "1",
        "FAKE_TTFT_S": "0.15",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    port = 18000 + os.getpid() % 1000
    server = subprocess.Popen(
        [*FAKE_LAUNCHER, "--model", "m", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        res = _autotune(
            tmp_path, mark, "bench", "--url", f"http://127.0.0.1:{port}", "--workload",
            str(_workload(tmp_path / "w.jsonl", n=30, step=0.2)), "--capacity", "--slo", "ttft_p90=400ms",
            "--capacity-min-level", "0s", "--json-out", str(tmp_path / "cap.json"),
        )  # fmt: skip
        assert server.poll() is None  # never restarted, never stopped
    finally:
        server.terminate()
        server.wait(10)
    assert res.returncode == 0, res.stderr
    assert "capacity at SLO ttft_p90<=400ms:" in res.stdout and "[held" in res.stdout
    assert "broke: ttft_p90" in res.stdout  # the level table names what broke
    data = json.loads((tmp_path / "cap.json").read_text())
    assert data["figures"]["capacity"] > 0 and data["figures"]["capacity_levels"]
    page = (tmp_path / "cap.html").read_text()
    assert "Latency against load" in page and "plot-capacity" in page


def test_a_capacity_night_promotes_the_pool_that_carries_more(tmp_path: Path, mark: str) -> None:
    """``nightly`` with ``--objective capacity``: the deployed starved baseline re-measured, a search
    trial bracketed, the larger pool's capacity confirmed against it and promoted with its header."""
    model = tmp_path / "fake-model"
    model.mkdir()
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    (tmp_path / "space.yaml").write_text(SPACE)
    res = _autotune(
        tmp_path, mark,
        "nightly", "--study", "capn", "--workload", str(_workload(tmp_path / "w.jsonl", n=30, step=0.2)),
        "--model", str(model), "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--space", str(tmp_path / "space.yaml"),
        "--baseline-arg=--kv-cache-memory-bytes=8M", "--objective", "capacity", "--slo", "ttft_p90=250ms",
        "--capacity-levels", "4", "--capacity-tolerance", "0.3", "--capacity-min-level", "0s", "--budget", "180s",
        "--rounds", "1",
        "--max-trials", "1", "--min-improvement", "0.2", "--out", str(tmp_path / "deployed.yaml"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "capacity: promoted trial #1" in res.stdout, res.stdout
    header = (tmp_path / "deployed.yaml").read_text()
    assert "# capacity at SLO ttft_p90<=250ms:" in header and "kv-cache-memory-bytes: 64M" in header
    assert "baseline (vLLM defaults with --kv-cache-memory-bytes=8M" in header
    st = optuna.load_study(study_name="capn", storage=f"sqlite:///{tmp_path / 'studies' / 'capn.db'}")
    for t in st.get_trials():  # each trial a bracket: the highest level that held is its capacity
        f = t.user_attrs["figures"]
        held = [lv["offered_rps"] for lv in f["capacity_levels"] if lv["held"]]
        assert 2 <= len(f["capacity_levels"]) <= 4 and max(held) == pytest.approx(f["capacity"], rel=1e-3)
    page = (tmp_path / "studies" / "capn" / "night-0001" / "report.html").read_text()
    assert "Capacity against load" in page and "plot-capacity" in page
