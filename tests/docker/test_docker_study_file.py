"""The entrypoint takes the study file instead of long argument lists (AUTOTUNE_STUDY_FILE ->
`MODE --file FILE`, each AUTOTUNE_* still a flag that overrides it), derives a night's budget from
the Job's deadline, and the study files of docker/study/ name options the real CLI has."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.docker._entrypoint import AUTOTUNE, SECRET, clean_env, fake_autotune, faked, run_entrypoint

STUDY_FILES = sorted((REPO / "docker" / "study").glob("*.yaml"))
NIGHTLY = str(REPO / "docker" / "study" / "nightly.yaml")


def test_the_study_file_replaces_the_required_variables(tmp_path: Path) -> None:
    got, err = faked(tmp_path, {"AUTOTUNE_MODE": "nightly", "AUTOTUNE_STUDY_FILE": NIGHTLY})
    assert got["argv"] == ["nightly", "--file", NIGHTLY]
    assert err.strip().splitlines()[-1].endswith(f"nightly --file {NIGHTLY}")  # the command, logged
    worker, _ = faked(tmp_path, {"AUTOTUNE_MODE": "worker", "AUTOTUNE_STUDY_FILE": NIGHTLY})
    assert worker["argv"] == ["worker", "--file", NIGHTLY]  # storage may be in the file


def test_variables_beside_the_study_file_become_flags_that_override_it(tmp_path: Path) -> None:
    got, _ = faked(
        tmp_path,
        {"AUTOTUNE_MODE": "run", "AUTOTUNE_STUDY_FILE": NIGHTLY, "AUTOTUNE_STUDY": "again",
         "AUTOTUNE_MODEL": "/models/other", "AUTOTUNE_N_TRIALS": "3", "AUTOTUNE_EXTRA_ARGS": "--seed 1"},
    )  # fmt: skip
    assert got["argv"] == [
        "run", "--file", NIGHTLY, "--study", "again", "--model", "/models/other", "--n-trials", "3", "--seed", "1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("deadline", "margin", "budget"), [("9000", None, "7200s"), ("5400", "600", "4800s")]
)
def test_a_nights_budget_is_the_deadline_minus_the_margin(
    tmp_path: Path, deadline: str, margin: str | None, budget: str
) -> None:
    env = {"AUTOTUNE_MODE": "nightly", "AUTOTUNE_STUDY_FILE": NIGHTLY, "AUTOTUNE_DEADLINE_SECONDS": deadline}
    if margin:
        env["AUTOTUNE_DEADLINE_MARGIN_SECONDS"] = margin
    got, _ = faked(tmp_path, env)
    assert got["argv"] == ["nightly", "--file", NIGHTLY, "--budget", budget]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (
            {"AUTOTUNE_STUDY_FILE": "/nonexistent/study.yaml"},
            "cannot read the study file /nonexistent/study.yaml",
        ),
        ({"AUTOTUNE_DEADLINE_SECONDS": "9000", "AUTOTUNE_BUDGET": "2h"}, "keep only the deadline"),
        ({"AUTOTUNE_DEADLINE_SECONDS": "2.5h"}, "must be whole seconds"),
        ({"AUTOTUNE_DEADLINE_SECONDS": "2000"}, "leaves 200 s after the 1800 s margin"),
        ({"AUTOTUNE_MODE": "run", "AUTOTUNE_DEADLINE_SECONDS": "9000"}, "AUTOTUNE_MODE=run has none"),
        (
            {"AUTOTUNE_STORAGE_URL": f"postgresql://u:{SECRET}@db/x"},
            "AUTOTUNE_STORAGE_URL carries a password",
        ),
    ],
)
def test_bad_study_file_settings_are_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], needle: str
) -> None:
    settings = {"AUTOTUNE_MODE": "nightly", "AUTOTUNE_STUDY_FILE": NIGHTLY, **env}
    res = run_entrypoint(clean_env(**settings, AUTOTUNE_BIN=str(fake_autotune(tmp_path))))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and res.stdout == ""
    assert len(lines) == 1 and needle in lines[0], res.stderr
    assert SECRET not in res.stderr


def _help(mode: str) -> str:
    res = subprocess.run(
        [str(AUTOTUNE), mode, "--help"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    if res.returncode != 0:
        pytest.skip(f"`autotune {mode} --help` fails in this tree: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


@pytest.mark.parametrize("study", STUDY_FILES, ids=lambda p: p.name)
def test_the_study_files_are_valid_study_files(study: Path) -> None:
    """Checked by the study file model itself (known keys, types, durations, SLOs)."""
    spec = pytest.importorskip(
        "autotune.studyfile", reason="the study file model (issue 27) is not in this tree yet"
    )
    loaded = spec.load_study_file(study)
    assert loaded.values == yaml.safe_load(study.read_text())  # every key taken as written (absolute paths)


@pytest.mark.parametrize("mode", ["nightly", "worker", "run"])
def test_the_real_cli_takes_the_study_file_the_entrypoint_gives(tmp_path: Path, mode: str) -> None:
    """--help last: the CLI rejects an unknown option before it prints the help."""
    if "--file" not in _help(mode):
        pytest.skip(f"`autotune {mode}` has no --file yet (issue 27: the study file)")
    env = {"AUTOTUNE_MODE": mode, "AUTOTUNE_STUDY_FILE": NIGHTLY, "AUTOTUNE_EXTRA_ARGS": "--help"}
    if mode == "nightly":
        env["AUTOTUNE_DEADLINE_SECONDS"] = "9000"
    res = run_entrypoint(clean_env(**env, AUTOTUNE_BIN=str(AUTOTUNE)), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"Usage: autotune {mode}" in res.stdout
