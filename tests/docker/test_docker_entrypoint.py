"""docker/entrypoint.sh outside a container, as CI can run it: the command it builds from the
environment, its one-line errors, secrets kept out of argv and output, exec (signals reach
autotune), a dry run and a one-trial study on the CPU build of vLLM through it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, wait_no_processes
from tests.docker._entrypoint import (
    API_KEY,
    AUTOTUNE,
    ENTRYPOINT,
    SECRET,
    clean_env,
    fake_autotune,
    faked,
    run_entrypoint,
)

RUN_ENV = {
    "AUTOTUNE_MODE": "run",
    "AUTOTUNE_STUDY": "s1",
    "AUTOTUNE_WORKLOAD": "/data/rag.jsonl",
    "AUTOTUNE_MODEL": "/models/m",
}


def test_run_mode_builds_the_command_from_the_environment(tmp_path: Path) -> None:
    got, err = faked(
        tmp_path,
        {
            **RUN_ENV,
            "AUTOTUNE_STUDIES_DIR": "/work/studies",
            "AUTOTUNE_OUT": "/work/studies/s1/best.yaml",
            "AUTOTUNE_N_TRIALS": "7",
            "AUTOTUNE_ENGINE_ARGS": "--max-model-len=8192  --enforce-eager",
            "AUTOTUNE_STORAGE_URL": "postgresql+psycopg://autotune@db:5432/autotune",
            "AUTOTUNE_EXTRA_ARGS": "--speed 3 --seed 1",
        },
    )
    assert got["argv"] == [
        "run", "--study", "s1", "--workload", "/data/rag.jsonl", "--model", "/models/m",
        "--studies-dir", "/work/studies", "--out", "/work/studies/s1/best.yaml",
        "--engine-arg=--max-model-len=8192", "--engine-arg=--enforce-eager", "--n-trials", "7",
        "--storage", "postgresql+psycopg://autotune@db:5432/autotune", "--speed", "3", "--seed", "1",
    ]  # fmt: skip
    assert err.strip().splitlines()[-1].endswith("--speed 3 --seed 1")  # the command, logged


def test_nightly_and_worker_modes_build_their_commands(tmp_path: Path) -> None:
    nightly, _ = faked(
        tmp_path,
        {**RUN_ENV, "AUTOTUNE_MODE": "nightly", "AUTOTUNE_BUDGET": "2h", "AUTOTUNE_INCUMBENT": "/etc/deployed.yaml",
         "AUTOTUNE_N_TRIALS": "7"},
    )  # fmt: skip
    assert nightly["argv"] == [
        "nightly", "--study", "s1", "--workload", "/data/rag.jsonl", "--model", "/models/m",
        "--incumbent", "/etc/deployed.yaml", "--budget", "2h",
    ]  # fmt: skip
    worker, _ = faked(
        tmp_path,
        {"AUTOTUNE_MODE": "worker", "AUTOTUNE_STUDY": "s1", "AUTOTUNE_STORAGE_URL": "postgresql+psycopg://a@db/x",
         "AUTOTUNE_WORKLOAD": "/ignored.jsonl"},
    )  # fmt: skip
    assert worker["argv"] == ["worker", "--study", "s1", "--storage", "postgresql+psycopg://a@db/x"]


def test_arguments_pass_through_to_autotune_unchanged(tmp_path: Path) -> None:
    got, _ = faked(tmp_path, {"AUTOTUNE_MODE": "run"}, "show", "--study", "a b")
    assert got["argv"] == ["show", "--study", "a b"]


def test_secrets_from_files_reach_the_environment_never_argv_or_output(tmp_path: Path) -> None:
    (tmp_path / "pg").write_text(SECRET + "\n")
    (tmp_path / "key").write_text(API_KEY)
    res = run_entrypoint(
        clean_env(
            **RUN_ENV,
            AUTOTUNE_BIN=str(fake_autotune(tmp_path)),
            PGPASSWORD_FILE=str(tmp_path / "pg"),
            AUTOTUNE_API_KEY_ENV="MY_KEY",
            MY_KEY_FILE=str(tmp_path / "key"),
        )
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["env"] == {"PGPASSWORD": SECRET, "MY_KEY": API_KEY}
    assert "--api-key-env" in got["argv"] and "MY_KEY" in got["argv"]
    argv_and_log = " ".join(got["argv"]) + res.stderr
    assert SECRET not in argv_and_log and API_KEY not in argv_and_log


def test_exec_makes_autotune_the_process_that_receives_signals(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(ENTRYPOINT)],
        env=clean_env(**RUN_ENV, AUTOTUNE_BIN=str(fake_autotune(tmp_path))),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out)["pid"] == proc.pid  # no shell left in between to swallow SIGTERM


MISSING = [
    ("run", "AUTOTUNE_STUDY"),
    ("run", "AUTOTUNE_WORKLOAD"),
    ("run", "AUTOTUNE_MODEL"),
    ("nightly", "AUTOTUNE_STUDY"),
    ("nightly", "AUTOTUNE_WORKLOAD"),
    ("nightly", "AUTOTUNE_MODEL"),
    ("worker", "AUTOTUNE_STUDY"),
    ("worker", "AUTOTUNE_STORAGE_URL"),
]


@pytest.mark.parametrize(("mode", "missing"), MISSING)
def test_a_missing_required_variable_is_one_line_and_exit_2(tmp_path: Path, mode: str, missing: str) -> None:
    env = {**RUN_ENV, "AUTOTUNE_MODE": mode, "AUTOTUNE_STORAGE_URL": "postgresql+psycopg://a@db/x"}
    del env[missing]
    res = run_entrypoint(clean_env(**env, AUTOTUNE_BIN=str(fake_autotune(tmp_path))))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2
    assert len(lines) == 1 and missing in lines[0], res.stderr
    assert res.stdout == ""  # autotune never ran


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "AUTOTUNE_MODE is not set"),
        ({"AUTOTUNE_MODE": "tune"}, "AUTOTUNE_MODE=tune"),
        ({**RUN_ENV, "AUTOTUNE_ENGINE_ARGS": "--max-model-len 8192"}, "'8192' is not a vLLM flag"),
        ({**RUN_ENV, "AUTOTUNE_API_KEY_ENV": "MY_KEY"}, "names MY_KEY, which is not set"),
        ({**RUN_ENV, "AUTOTUNE_API_KEY_ENV": API_KEY}, "must be the NAME of a variable"),
        ({**RUN_ENV, "PGPASSWORD_FILE": "/nonexistent/pg"}, "PGPASSWORD_FILE: cannot read"),
        ({**RUN_ENV, "PGPASSWORD_FILE": "/etc/hostname", "PGPASSWORD": SECRET}, "both PGPASSWORD and"),
        (
            {**RUN_ENV, "AUTOTUNE_STORAGE_URL": f"postgresql://autotune:{SECRET}@db/x"},
            "AUTOTUNE_STORAGE_URL carries a password",
        ),
        (
            {**RUN_ENV, "AUTOTUNE_STORAGE_URL": f"postgresql://autotune@db/x?password={SECRET}"},
            "AUTOTUNE_STORAGE_URL carries a password",
        ),
    ],
)
def test_bad_settings_are_one_line_and_exit_2_without_echoing_a_secret(
    tmp_path: Path, env: dict[str, str], needle: str
) -> None:
    res = run_entrypoint(clean_env(**env, AUTOTUNE_BIN=str(fake_autotune(tmp_path))))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and res.stdout == ""
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert SECRET not in res.stderr and API_KEY not in res.stderr


ALL_SETTINGS = {
    **RUN_ENV,
    "AUTOTUNE_STUDIES_DIR": "studies",
    "AUTOTUNE_OUT": "best.yaml",
    "AUTOTUNE_N_TRIALS": "3",
    "AUTOTUNE_INCUMBENT": "deployed.yaml",
    "AUTOTUNE_BUDGET": "2h",
    "AUTOTUNE_ENGINE_ARGS": "--enforce-eager",
    "AUTOTUNE_API_KEY_ENV": "MY_KEY",
    "MY_KEY": API_KEY,
    "AUTOTUNE_STORAGE_URL": "sqlite:///never-opened.db",
}


@pytest.mark.parametrize("mode", ["run", "nightly", "worker"])
def test_every_option_the_entrypoint_builds_exists_in_the_real_cli(tmp_path: Path, mode: str) -> None:
    """Every setting at once, and --help last: the CLI rejects an unknown option before it prints
    the help, so exit 0 means each option the entrypoint wrote is one the command takes."""
    if (
        mode == "worker"
        and run_entrypoint(clean_env(AUTOTUNE_BIN=str(AUTOTUNE)), "worker", "--help").returncode
    ):
        pytest.skip("this build has no `autotune worker` yet (issue 15)")
    settings = {**ALL_SETTINGS, "AUTOTUNE_MODE": mode}
    env = clean_env(**settings, AUTOTUNE_BIN=str(AUTOTUNE), AUTOTUNE_EXTRA_ARGS="--help")
    res = run_entrypoint(env, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"Usage: autotune {mode}" in res.stdout
    assert not (tmp_path / "studies").exists()


def test_passthrough_reaches_the_real_cli() -> None:
    res = run_entrypoint(clean_env(AUTOTUNE_BIN=str(AUTOTUNE)), "run", "--help")
    assert res.returncode == 0, res.stderr
    assert "--workload" in res.stdout and "Exit codes" in res.stdout


def test_dry_run_through_the_entrypoint_prints_the_commands(tmp_path: Path, tiny_model: Path) -> None:
    """The CPU build's own argument parser checks each command; nothing starts, nothing is written."""
    (tmp_path / "key").write_text(API_KEY)
    res = run_entrypoint(
        clean_env(
            **{
                **RUN_ENV,
                "AUTOTUNE_WORKLOAD": str(REPO / "examples" / "rag.jsonl"),
                "AUTOTUNE_MODEL": str(tiny_model),
            },
            AUTOTUNE_BIN=str(AUTOTUNE),
            AUTOTUNE_STUDIES_DIR=str(tmp_path / "studies"),
            AUTOTUNE_ENGINE_ARGS="--enforce-eager --max-model-len=2048",
            AUTOTUNE_API_KEY_ENV="VLLM_API_KEY",
            VLLM_API_KEY_FILE=str(tmp_path / "key"),
            AUTOTUNE_EXTRA_ARGS="--dry-run --no-check-memory --dry-run-samples 2",
        ),
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    commands = [ln for ln in res.stdout.splitlines() if "--port" in ln and not ln.startswith("#")]
    assert len(commands) == 3, res.stdout  # the baseline and 2 sampled trials
    assert res.stdout.count("accepted by vLLM's parser") == 3
    assert all("--enforce-eager" in c and "--max-model-len 2048" in c for c in commands)
    assert all("VLLM_API_KEY='***'" in c for c in commands)
    assert API_KEY not in res.stdout + res.stderr
    assert not (tmp_path / "studies").exists()


def test_sigterm_to_the_entrypoint_stops_autotune_and_its_engine(tmp_path: Path, mark: str) -> None:
    """`docker stop` / pod deletion / `systemctl stop`: SIGTERM to the container's first process."""
    wl = tmp_path / "slow.jsonl"
    wl.write_text(
        "".join(
            json.dumps({"prompt": f"q{i}", "max_tokens": 200, "timestamp": i * 0.5}) + "\n" for i in range(40)
        )
    )
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        (REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json").read_text()
    )
    # The fake OpenAI server as the engine, behind a one-word launcher (AUTOTUNE_EXTRA_ARGS is
    # split on spaces).
    launcher = tmp_path / "fake-vllm"
    launcher.write_text("#!/bin/sh\nexec " + " ".join(FAKE_LAUNCHER) + ' "$@"\n')
    launcher.chmod(0o755)
    proc = subprocess.Popen(
        [str(ENTRYPOINT)],
        env=clean_env(
            **{**RUN_ENV, "AUTOTUNE_WORKLOAD": str(wl), "AUTOTUNE_MODEL": str(model)},
            AUTOTUNE_BIN=str(AUTOTUNE),
            AUTOTUNE_STUDIES_DIR=str(tmp_path / "studies"),
            AUTOTUNE_N_TRIALS="3",
            AUTOTUNE_EXTRA_ARGS=f"--no-check-args --no-check-memory --confirm-rounds 0 --launcher {launcher}",
            **{MARK_ENV: mark, "PYTHONPATH": str(REPO)},
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any("fake_vllm.py" in " ".join(p.cmdline()) for p in processes_marked(mark)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fake engine never started"
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "every vLLM process was stopped" in err
    assert not wait_no_processes(mark, timeout=15)


@pytest.mark.vllm(alongside=True)
def test_one_trial_study_through_the_entrypoint_on_real_vllm(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    """The baseline on the CPU build of vLLM (one start), the API key from a file as in a container."""
    (tmp_path / "key").write_text(API_KEY)
    studies = tmp_path / "studies"
    res = run_entrypoint(
        clean_env(
            AUTOTUNE_MODE="run",
            AUTOTUNE_STUDY="docker-ci",
            AUTOTUNE_WORKLOAD=str(REPO / "examples" / "rag.jsonl"),
            AUTOTUNE_MODEL=str(tiny_model),
            AUTOTUNE_STUDIES_DIR=str(studies),
            AUTOTUNE_N_TRIALS="1",
            AUTOTUNE_ENGINE_ARGS="--enforce-eager --max-model-len=2048 --kv-cache-memory-bytes=64M",
            AUTOTUNE_API_KEY_ENV="VLLM_API_KEY",
            VLLM_API_KEY_FILE=str(tmp_path / "key"),
            AUTOTUNE_EXTRA_ARGS="--confirm-rounds 0 --speed 3 --passes 1",
            AUTOTUNE_BIN=str(AUTOTUNE),
            **{MARK_ENV: mark},
        ),
        timeout=540,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    best = studies / "docker-ci" / "best.yaml"
    assert (studies / "docker-ci.db").exists() and best.exists(), res.stderr[-3000:]
    assert list((studies / "docker-ci").glob("trial-*.log"))
    written = [
        best.read_text(),
        *(p.read_text(errors="replace") for p in (studies / "docker-ci").glob("*.log")),
    ]
    assert not any(API_KEY in text for text in [res.stdout, res.stderr, *written])
