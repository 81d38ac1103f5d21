"""The incumbent is the deployed file (issue 37, on the fake server): `out` when it exists, whoever
wrote it. A night after `run` measures the run's export, and a best candidate that is that very
command is "kept (same config)": nothing written, no hook. After `nightly rollback` the next night
measures the restored file."""

from __future__ import annotations

import os
from pathlib import Path

import optuna

from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO
from tests.e2e.test_cli import _fake_run, _run
from tests.e2e.test_nightly_promote import _files


def _env(mark: str) -> dict[str, str]:  # block 64 is ~40% faster than 128 on the fake, far above its jitter
    return {**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO), "FAKE_TTFT_SCALE": "5"}


def _night(tmp_path: Path, *extra: str) -> list[str]:
    wl, model, space = _files(tmp_path)
    return [
        "nightly", "--study", "prod", "--workload", str(wl), "--model", str(model), "--space", str(space),
        "--launcher", " ".join(FAKE_LAUNCHER), "--studies-dir", str(tmp_path / "studies"),
        "--no-check-args", "--no-check-memory", "--objective", "ttft_p50", "--budget", "6m",
        "--rounds", "2", "--min-improvement", "0.15", "--max-trials", "4", "--passes", "1",
        "--out", str(tmp_path / "deployed.yaml"), "--on-promote", f"touch {tmp_path / 'hook-ran'}",
        "--seed", "1", *extra,
    ]  # fmt: skip


def _nights(tmp_path: Path) -> list[dict]:
    st = optuna.load_study(study_name="prod", storage=f"sqlite:///{tmp_path / 'studies' / 'prod.db'}")
    return [v for k, v in sorted(st.user_attrs.items()) if k.startswith("night:")]


def test_a_night_after_run_measures_its_export_and_keeps_the_same_config(tmp_path: Path, mark: str) -> None:
    wl, _, space = _files(tmp_path)
    out = tmp_path / "deployed.yaml"
    run = _fake_run(tmp_path, wl, "--study", "prod", "--space", str(space), "--objective", "ttft_p50",
                    "--n-trials", "4", "--passes", "1", "--out", str(out), "--seed", "1")  # fmt: skip
    r0 = _run(run, mark, tmp_path, env=_env(mark))
    assert r0.returncode == 0, r0.stderr
    exported = out.read_bytes()
    r1 = _run(_night(tmp_path), mark, tmp_path, env=_env(mark))
    assert r1.returncode == 0, (r1.stdout, r1.stderr)
    (n1,) = _nights(tmp_path)
    assert n1["incumbent_label"] == "incumbent deployed.yaml (deployed)"  # not "(baseline)"
    assert "--block-size" in n1["incumbent_args"]
    assert n1["decision"] == "kept" and n1["reason"].startswith("kept (same config): trial #"), n1["reason"]
    assert out.read_bytes() == exported and not (tmp_path / "hook-ran").exists()


def test_after_a_rollback_the_next_night_measures_the_restored_file(tmp_path: Path, mark: str) -> None:
    out = tmp_path / "deployed.yaml"
    deployed = "model: m\nblock-size: 128\nkv-cache-memory-bytes: 8M\n"  # by hand: a starved pool, 3x slower
    out.write_text(deployed)
    r1 = _run(_night(tmp_path), mark, tmp_path, env=_env(mark))
    assert r1.returncode == 0 and "Promoted trial #" in r1.stdout, (r1.stdout, r1.stderr)
    assert (tmp_path / "hook-ran").exists() and "kv-cache-memory-bytes" not in out.read_text()
    rb = _run(["nightly", "rollback", "--study", "prod", "--out", str(out)], mark, tmp_path)
    assert rb.returncode == 0, rb.stderr
    assert out.read_text() == deployed
    r2 = _run(_night(tmp_path, "--max-trials", "0"), mark, tmp_path, env=_env(mark))
    assert r2.returncode == 0, (r2.stdout, r2.stderr)
    n1, n2 = _nights(tmp_path)
    assert n1["decision"] == "promoted" and "--kv-cache-memory-bytes" not in n1["incumbent_args"]
    assert n2["incumbent_label"] == "incumbent deployed.yaml (deployed)"
    assert n2["incumbent_args"] == [
        "--block-size",
        "128",
        "--kv-cache-memory-bytes",
        "8M",
    ]  # the restored file, not night 1's promotion


def test_a_deployed_file_that_writes_out_the_baselines_command_is_one_arm(tmp_path: Path, mark: str) -> None:
    """A file that holds every flag of the baseline's command (the fixed and the baseline's own flags,
    in another order: what `run` exports when nothing beat the baseline) is the baseline: one arm,
    one engine a round, not the same command measured twice as two arms."""
    out = tmp_path / "deployed.yaml"
    out.write_text("model: m\nmax-num-seqs: 8\nmax-model-len: 1024\n")
    fixed = ["--engine-arg=--max-model-len=1024", "--baseline-arg=--max-num-seqs=8"]
    r = _run(_night(tmp_path, "--max-trials", "0", "--rounds", "1", *fixed), mark, tmp_path, env=_env(mark))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "the incumbent's command is the baseline's" in r.stdout + r.stderr, (r.stdout, r.stderr)
    (n1,) = _nights(tmp_path)
    assert [run["arm"] for run in n1["runs"]] == ["incumbent deployed.yaml (deployed)"]
    assert n1["baseline_figure"] == n1["incumbent_figure"]

    out.write_text("model: m\nmax-num-seqs: 16\nmax-model-len: 1024\n")  # one flag apart: two arms
    r = _run(_night(tmp_path, "--max-trials", "0", "--rounds", "1", *fixed), mark, tmp_path, env=_env(mark))
    assert r.returncode == 0, (r.stdout, r.stderr)
    _, n2 = _nights(tmp_path)
    assert [run["arm"] for run in n2["runs"]] == ["baseline", "incumbent deployed.yaml (deployed)"]
