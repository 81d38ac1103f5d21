"""The CLI as a user drives it: bad input fails fast and cleanly; Ctrl-C leaves no engine behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, wait_no_processes


def _autotune(args: list[str], mark: str, cwd: Path, **popen: object) -> subprocess.Popen[str]:
    env = popen.pop("env", None) or {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as at a terminal, even when this suite runs in the background (where a shell
        # starts it with SIGINT ignored, which Python then keeps: SIGINT would do nothing)
        preexec_fn=_sigint_as_at_a_terminal,
        **popen,  # type: ignore[arg-type]
    )


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(args: list[str], mark: str, cwd: Path, **popen: object) -> subprocess.CompletedProcess[str]:
    p = _autotune(args, mark, cwd, **popen)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _good_workload(path: Path, n: int = 6) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {"prompt": f"question {i} " + "word " * 50, "max_tokens": 4, "timestamp": i * 0.05}
                )
                + "\n"
            )
    return path


def _fake_model(tmp_path: Path) -> Path:
    """A model directory as the tool checks it (config.json); the fake server serves it."""
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(
        (REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json").read_text()
    )
    return model


def _fake_run(tmp_path: Path, wl: Path, *extra: str) -> list[str]:
    """``autotune run`` against the fake server: no vLLM parser, no memory checks, no confirmation
    unless ``extra`` asks for them."""
    return [
        "run", "--workload", str(wl), "--model", str(_fake_model(tmp_path)),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--confirm-rounds", "0", *extra,
    ]  # fmt: skip


def _real_vllm_run(tiny_model: Path, tmp_path: Path) -> list[str]:
    """A 2-trial study on the real CPU build of the example RAG workload."""
    return [
        "run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model),
        "--studies-dir", str(tmp_path / "studies"), "--no-check-args", "--n-trials", "2", "--confirm-rounds", "0",
        "--passes", "2", "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
        "--engine-arg=--kv-cache-memory-bytes=64M",
    ]  # fmt: skip


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


def test_malformed_workload_line_is_one_line_error_and_nothing_starts(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    lines = wl.read_text().splitlines()
    lines[2] = '{"prompt": "hello", "max_tokens": "many"}'
    wl.write_text("\n".join(lines) + "\n")
    res = _run(
        [
            "run",
            "--workload",
            str(wl),
            "--model",
            "m",
            "--launcher",
            " ".join(FAKE_LAUNCHER),
            "--studies-dir",
            str(tmp_path / "studies"),
            "--no-check-args",
        ],
        mark,
        tmp_path,
    )
    assert res.returncode == 2, res.stderr
    errs = _error_lines(res.stderr)
    assert len(errs) == 1, errs
    assert "rag.jsonl:3" in errs[0] and "max_tokens" in errs[0] and "'many'" in errs[0]
    assert not processes_marked(mark)
    assert not (tmp_path / "studies").exists()  # nothing half-written


def test_malformed_search_space_is_one_line_error_and_nothing_starts(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    space = tmp_path / "space.yaml"
    space.write_text(
        "name: s\nplatform: cpu\nparameters:\n  block_size:\n    type: categorical\n"
        "    choises: [32, 64]\n    flag: --block-size\n"
    )
    res = _run(_fake_run(tmp_path, wl, "--space", str(space)), mark, tmp_path)
    assert res.returncode == 2, res.stderr
    errs = _error_lines(res.stderr)
    assert len(errs) == 1, errs
    assert "space.yaml:6" in errs[0] and "parameters.block_size.choises" in errs[0]
    assert not processes_marked(mark)
    assert not (tmp_path / "studies").exists()


def _commands() -> list[tuple[list[str], object]]:
    """Every command of the CLI (subcommands too), as (argv prefix, click command)."""
    import typer

    from autotune.cli import app

    found: list[tuple[list[str], object]] = []

    def walk(prefix: list[str], cmd: object) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk([*prefix, name], sub)
        else:
            found.append((prefix, cmd))

    walk([], typer.main.get_command(app))
    return found


COMMANDS = _commands()


@pytest.mark.parametrize("prefix", [c for c, _ in COMMANDS], ids=[" ".join(c) for c, _ in COMMANDS])
def test_help_lists_every_option_of_every_command(tmp_path: Path, mark: str, prefix: list[str]) -> None:
    cmd = dict((tuple(c), k) for c, k in COMMANDS)[tuple(prefix)]
    options = [o for p in cmd.params for o in p.opts if o.startswith("--")]  # type: ignore[attr-defined]
    res = _run(
        [*prefix, "--help"], mark, tmp_path, env={**os.environ, "COLUMNS": "250", "PYTHONPATH": str(REPO)}
    )
    assert res.returncode == 0, res.stderr
    missing = [o for o in options if o not in res.stdout]
    assert not missing, missing


@pytest.mark.parametrize("prefix", [c for c, _ in COMMANDS], ids=[" ".join(c) for c, _ in COMMANDS])
def test_a_misspelled_option_is_a_one_line_usage_error_on_every_command(
    tmp_path: Path, mark: str, prefix: list[str]
) -> None:
    cmd = dict((tuple(c), k) for c, k in COMMANDS)[tuple(prefix)]
    real = next(o for p in cmd.params for o in p.opts if o.startswith("--") and o != "--help")  # type: ignore[attr-defined]
    typo = real + "x"  # --workload -> --workloadx: click suggests the real one
    res = _run([*prefix, typo, "1"], mark, tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and typo in errors[0], res.stderr
    assert "Usage:" in res.stderr
    assert real in errors[0], errors  # "Possible options: ..." names the one meant


def test_fake_study_through_the_cli_prints_progress_and_exports(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl")
    space = tmp_path / "space.yaml"
    space.write_text(
        "name: s\nplatform: cpu\nparameters:\n"
        "  block_size: {type: categorical, choices: [32, 64, 128], flag: --block-size}\n"
    )
    res = _run(
        _fake_run(
            tmp_path, wl, "--space", str(space), "--n-trials", "3", "--out", str(tmp_path / "best.yaml")
        ),
        mark,
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "trial 1/3" in res.stderr and "trial 3/3" in res.stderr and "best so far" in res.stderr
    assert "baseline: vLLM defaults" in res.stderr
    assert (tmp_path / "best.yaml").exists() and f"--config {tmp_path / 'best.yaml'}" in res.stdout
    assert (tmp_path / "studies" / "rag-s.db").exists()
    assert (tmp_path / "studies" / "rag-s" / "trial-0000.log").exists()


def _signal_when_engine_runs(
    proc: subprocess.Popen[str], mark: str, needle: str, settle_s: float, sig: int = signal.SIGINT
) -> None:
    """Send ``sig`` to the tool once an engine process whose command contains ``needle`` runs
    (SIGINT is Ctrl-C; SIGKILL leaves the tool no handler, atexit or finally)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        # the tool's own command line names the fake's path in --launcher: only its children count
        if any(p.pid != proc.pid and needle in " ".join(p.cmdline()) for p in processes_marked(mark)):
            break
        time.sleep(0.2)
    else:
        pytest.fail("engine never started")
    time.sleep(settle_s)
    proc.send_signal(sig)


def test_ctrl_c_during_fake_measurement_leaves_no_engine(tmp_path: Path, mark: str) -> None:
    wl = tmp_path / "slow.jsonl"
    with wl.open("w") as f:
        for i in range(40):
            f.write(json.dumps({"prompt": f"q{i}", "max_tokens": 200, "timestamp": i * 0.5}) + "\n")
    proc = _autotune(_fake_run(tmp_path, wl, "--n-trials", "3"), mark, tmp_path)
    _signal_when_engine_runs(proc, mark, "fake_vllm.py", settle_s=2.0)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not wait_no_processes(mark, timeout=15)


@pytest.mark.vllm(alongside=True)  # what the engine does, not how fast: beside another engine
def test_ctrl_c_during_real_vllm_start_leaves_no_vllm_process(
    tmp_path: Path, tiny_model: Path, mark: str
) -> None:
    proc = _autotune(
        _real_vllm_run(tiny_model, tmp_path),
        mark,
        tmp_path,
    )
    # Interrupt once vLLM's engine-core process exists (mid start-up: the hardest moment to clean up).
    _signal_when_engine_runs(proc, mark, "vllm.entrypoints", settle_s=12.0)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    left = wait_no_processes(mark, timeout=20)
    assert not left, [p.cmdline() for p in left]


@pytest.mark.parametrize(("choices", "confirmed"), [("[64]", True), ("[128]", False)])
def test_confirmation_keeps_the_best_only_if_it_beats_the_noise(
    tmp_path: Path, mark: str, choices: str, confirmed: bool
) -> None:
    """The fake is fastest at block size 64 and runs 128 by default: a real gain is confirmed; a
    'best' that is the defaults again (noise) is not, and vLLM's defaults are exported."""
    wl = _good_workload(tmp_path / "rag.jsonl", n=10)
    space = tmp_path / "space.yaml"
    space.write_text(
        f"name: s\nplatform: cpu\nparameters:\n  block_size: {{type: categorical, choices: {choices}, flag: --block-size}}\n"
    )
    res = _run(
        [
            *_fake_run(tmp_path, wl, "--space", str(space), "--n-trials", "2"),
            "--confirm-rounds",
            "2",
            "--min-improvement",
            "0.2",  # the fake's block-64 gain is ~40%; identical configs differ by jitter only
            "--objective",
            "ttft_p50",
            "--out",
            str(tmp_path / "best.yaml"),
        ],
        mark,
        tmp_path,
        # the fake's modelled TTFT x10 (90 ms at block 128, 50 at 64): far above the HTTP overhead's
        # jitter on a loaded 2-core machine, where a 4 ms gain was once lost in it (and at x5, a 20 ms
        # gain beside a real vLLM engine in CI, 2026-12-07)
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_TTFT_SCALE": "10"},
    )
    assert res.returncode == 0, res.stderr
    best_yaml = (tmp_path / "best.yaml").read_text()
    if confirmed:
        assert "re-measured trial 1 against the baseline: confirmed" in res.stderr
        assert "block-size: 64" in best_yaml
        # the costs against the baseline, in the summary and the header (the fake's block 64 costs none)
        costs = next(
            ln for ln in res.stdout.splitlines() if "beyond the 10% noise in the re-measurement" in ln
        )
        assert f"# {costs}" in best_yaml
    else:
        assert "block-size" not in best_yaml  # vLLM's defaults
        assert "the baseline was best" in best_yaml
        # the same configuration twice: either the baseline measured best (nothing to confirm), or the
        # noise made trial 1 look better and the re-measurement refused it
        if "re-measured trial 1" in res.stderr:
            assert "re-measured trial 1 against the baseline: not confirmed" in res.stderr


def test_sigkill_of_the_tool_leaves_no_engine_or_engine_child(tmp_path: Path, mark: str) -> None:
    wl = _good_workload(tmp_path / "rag.jsonl", n=40)
    proc = _autotune(
        _fake_run(tmp_path, wl, "--n-trials", "2"),
        mark,
        tmp_path,
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_SPAWN_CHILD": "1"},
    )
    _signal_when_engine_runs(proc, mark, "fake_vllm.py", settle_s=1.0, sig=signal.SIGKILL)
    proc.communicate(timeout=30)
    left = wait_no_processes(mark, timeout=20)
    assert not left, [p.cmdline() for p in left]


@pytest.mark.vllm(alongside=True)
def test_sigkill_of_the_tool_leaves_no_vllm_engine_core(tmp_path: Path, tiny_model: Path, mark: str) -> None:
    """Seen before the guardian: the API server died with the tool but VLLM::EngineCore lived on."""
    proc = _autotune(
        _real_vllm_run(tiny_model, tmp_path),
        mark,
        tmp_path,
    )
    _signal_when_engine_runs(proc, mark, "VLLM::EngineCore", settle_s=3.0, sig=signal.SIGKILL)
    proc.communicate(timeout=30)
    left = wait_no_processes(mark, timeout=30)
    assert not left, [p.cmdline() for p in left]


@pytest.mark.vllm(alongside=True)  # vLLM's own argument parser checks every command
def test_dry_run_prints_checked_commands_and_launches_nothing(tmp_path: Path, mark: str) -> None:
    """The CUDA space on the CPU build: offload is reported unsupported before launch, not a crash;
    every command is checked by the installed vLLM's own parser; nothing starts, nothing is written."""
    wl = _good_workload(tmp_path / "rag.jsonl")
    res = _run(
        [
            "run",
            "--workload",
            str(wl),
            "--model",
            str(_fake_model(tmp_path)),
            "--space",
            str(REPO / "search_spaces" / "cuda.yaml"),
            "--studies-dir",
            str(tmp_path / "studies"),
            "--dry-run",
            "--dry-run-samples",
            "3",
            "--api-key-env",
            "MY_KEY",
            "--no-check-memory",
        ],
        mark,
        tmp_path,
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "MY_KEY": "sk-secret-123"},
    )
    assert res.returncode == 0, res.stderr
    assert "not tuned with profile cpu: cpu_swap_space_gb" in res.stdout
    commands = [ln for ln in res.stdout.splitlines() if "--port" in ln and not ln.startswith("#")]
    assert len(commands) == 4 and not any("--kv-offloading-size" in c for c in commands)
    assert res.stdout.count("accepted by vLLM's parser") == 4  # the baseline and 3 samples
    assert all("VLLM_API_KEY='***'" in c for c in commands)
    assert "sk-secret-123" not in res.stdout + res.stderr
    assert not (tmp_path / "studies").exists()
    assert not processes_marked(mark)
