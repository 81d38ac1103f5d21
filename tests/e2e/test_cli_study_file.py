"""One study file for every command: ``run -f`` and the same study as flags are one study; ``nightly``,
``worker`` and ``compare`` read the same file; ``init`` writes one; ``show`` prints the effective study."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import AutotuneError
from tests.conftest import FAKE_LAUNCHER, REPO

FINGERPRINT = re.compile(r"# study fingerprint ([0-9a-f]{16})")


def _invoke(args: list[str]) -> tuple[int, str]:
    """The command in this process (one import of vLLM for all); an error as ``autotune.cli.main`` prints it."""
    res = CliRunner().invoke(app, args)
    if isinstance(res.exception, AutotuneError):
        return res.exception.exit_code, res.output + f"error: {res.exception}"
    return res.exit_code, res.output


def _study_file(tmp_path: Path, model: Path) -> Path:
    """examples/study.yaml beside a copy of its workload, its model replaced by ``model``."""
    folder = tmp_path / "conf"
    folder.mkdir()
    shutil.copy(REPO / "examples" / "rag.jsonl", folder / "rag.jsonl")
    text = (REPO / "examples" / "study.yaml").read_text().replace("../.models/tiny-l8", str(model))
    (folder / "study.yaml").write_text(text.replace("../studies/", str(tmp_path / "studies") + "/"))
    return folder / "study.yaml"


def test_the_study_file_and_the_same_flags_are_one_study(tmp_path: Path, tiny_model: Path) -> None:
    path = _study_file(tmp_path, tiny_model)
    quick = ["--dry-run", "--no-check-args", "--no-prior", "--dry-run-samples", "0"]
    rc_file, out_file = _invoke(["run", "-f", str(path), *quick])
    assert rc_file == 0, out_file
    flags = [
        "run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model),
        "--study", "demo-rag", "--n-trials", "5", "--speed", "1", "--objective", "ttft_p50",
        "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
        "--baseline-arg=--kv-cache-memory-bytes=20M", *quick,
    ]  # fmt: skip
    rc_flags, out_flags = _invoke(flags)
    assert rc_flags == 0, out_flags
    fp_file, fp_flags = FINGERPRINT.findall(out_file), FINGERPRINT.findall(out_flags)
    assert fp_file and fp_file == fp_flags
    rc, out = _invoke([*flags, "--speed", "2"])  # another replay speed is another study
    assert rc == 0 and FINGERPRINT.findall(out) != fp_file
    assert "--kv-cache-memory-bytes 20M" in out_file  # the file's fixed flags reach the command


def test_nightly_worker_and_compare_take_the_same_file(tmp_path: Path) -> None:
    model = tmp_path / "fake-model"
    model.mkdir()
    shutil.copy(REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json", model / "config.json")
    path = _study_file(tmp_path, model)
    with path.open("a") as f:
        f.write(f"launcher: {' '.join(FAKE_LAUNCHER)}\ncheck_args: false\ncheck_memory: false\n")
        f.write(f"studies_dir: {tmp_path / 'studies'}\n")
    # worker: the study's name comes from the file (it does not exist yet: refused, named)
    rc, out = _invoke(["worker", "-f", str(path)])
    assert rc == 1 and "no study 'demo-rag'" in out, out
    # compare: the file's workload and flags; the arm B config is this invocation's (and --speed 4:
    # the file's 15.7 s replay in 4 s, as a flag beside the file; the file's other keys still hold)
    best = tmp_path / "best.yaml"
    best.write_text(f"model: {model}\nblock-size: 32\n")
    rc, out = _invoke(
        ["compare", "-f", str(path), "--config", str(best), "--rounds", "1", "--passes", "1", "--speed", "4"]
    )
    assert rc == 0, out
    assert "rag.jsonl: 1 runs each" in out
    # nightly: the file's study, budget from the flag
    rc, out = _invoke(
        ["nightly", "-f", str(path), "--budget", "3m", "--rounds", "1", "--max-trials", "1", "--speed", "4"]
    )
    assert rc in (0, 3), out
    assert (tmp_path / "studies" / "demo-rag.db").exists()
    rc, out = _invoke(["show", "--study", "demo-rag", "--studies-dir", str(tmp_path / "studies")])
    assert rc == 0 and "workload:" in out and "fingerprint" in out, out
    rc, out = _invoke(
        ["nightly", "history", "--study", "demo-rag", "--studies-dir", str(tmp_path / "studies")]
    )
    assert rc == 0 and "nights of study demo-rag" in out, out


def test_an_unknown_key_is_a_one_line_error_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("workload: x.jsonl\nmodle: m\n")
    for command in (["run"], ["nightly"], ["worker"], ["compare"]):
        rc, out = _invoke([*command, "-f", str(path)])
        assert rc == 2, out
        assert f"{path}:2: unknown key 'modle' (did you mean 'model'?)" in out.replace("\n", "")


@pytest.mark.parametrize("force", [False, True])
def test_init_writes_a_commented_study_file_that_runs(tmp_path: Path, tiny_model: Path, force: bool) -> None:
    target = tmp_path / "study.yaml"
    if force:
        target.write_text("old")
    args = ["init", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model)]
    rc, out = _invoke([*args, "--out", str(target), *(["--force"] if force else [])])
    assert rc == 0, out
    text = target.read_text()
    assert "prefix reuse" in text and "profile: cpu" in text and "# n_trials: 10" in text
    rc, out = _invoke(
        [
            "run",
            "-f",
            str(target),
            "--dry-run",
            "--no-check-args",
            "--no-check-memory",
            "--no-prior",
            "--dry-run-samples",
            "0",
        ]
    )
    assert rc == 0, out
    rc, out = _invoke([*args, "--out", str(target)])  # never overwritten unasked
    assert rc == 2 and "exists" in out


def test_a_gpu_profile_previewed_here_says_this_machine_cannot_run_it(
    tmp_path: Path, tiny_model: Path
) -> None:
    """The README's preview use: a dry run of a GPU profile on a machine without a GPU exits 0 and says
    what it shows, not "neither vLLM's defaults nor any KV-memory setting fits" with exit 5."""
    args = ["run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model)]
    rc, out = _invoke(
        [*args, "--profile", "cuda-native", "--dry-run", "--no-check-args", "--dry-run-samples", "1"]
    )
    flat = " ".join(out.split())
    if "previewing profile cuda-native" not in flat:
        pytest.skip("this machine can run the cuda-native profile")
    assert rc == 0, out
    assert "this machine cannot run this study" in flat and "what a cuda-native host would launch" in flat
    assert "neither vLLM's defaults" not in flat


def test_a_fixed_kv_size_that_does_not_fit_is_named_as_the_users(tmp_path: Path, tiny_model: Path) -> None:
    args = ["run", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", str(tiny_model)]
    rc, out = _invoke([*args, "--engine-arg=--kv-cache-memory-bytes=100000G", "--dry-run", "--no-check-args"])
    flat = " ".join(out.split())
    assert rc == 5, out
    assert "your fixed --kv-cache-memory-bytes do not fit" in flat and "neither vLLM's defaults" not in flat


@pytest.mark.parametrize("given", ["absolute", "relative", "hub id"])
def test_init_writes_a_local_model_path_absolute_and_a_hub_id_as_it_is(
    tmp_path: Path, tiny_model: Path, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study file is read from its own folder and copied elsewhere: a local model is written as its
    absolute path (init once rewrote an absolute --model into one relative to the file)."""
    monkeypatch.chdir(tiny_model.parent)
    model = {"absolute": str(tiny_model), "relative": tiny_model.name, "hub id": "Qwen/Qwen2.5-7B"}[given]
    target = tmp_path / "conf" / "study.yaml"
    rc, out = _invoke(
        ["init", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", model, "--out", str(target)]
    )
    assert rc == 0, out
    written = yaml.safe_load(target.read_text())["model"]
    assert written == ("Qwen/Qwen2.5-7B" if given == "hub id" else str(tiny_model.absolute()))
