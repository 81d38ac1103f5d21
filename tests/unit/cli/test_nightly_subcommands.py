"""`nightly rollback` and `nightly history` take the study from a study file (`-f/--file`), as the
Kubernetes rollback Job runs them, and from the group's own `--file` (`nightly -f F rollback`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli import main
from autotune.nightly import keep_promoted


def _study(tmp_path: Path) -> tuple[Path, Path]:
    export = tmp_path / "export" / "best.yaml"
    export.parent.mkdir()
    for seqs in (64, 128):
        export.write_text(f"max-num-seqs: {seqs}\n")
        keep_promoted(export, export.parent / "history")
    study = tmp_path / "study.yaml"
    study.write_text(f"study: prod\nstudies_dir: {tmp_path / 'studies'}\nout: export/best.yaml\n")
    return study, export


@pytest.mark.parametrize("argv", [["nightly", "rollback", "--file"], ["nightly", "-f"]])
def test_rollback_takes_the_study_and_export_from_the_file(tmp_path: Path, argv: list[str]) -> None:
    study, export = _study(tmp_path)
    args = [*argv, str(study)] + (["rollback"] if argv[-1] == "-f" else [])
    main(args)  # returns: exit 0
    assert export.read_text() == "max-num-seqs: 64\n"  # `out` relative to the file's folder


def test_history_takes_the_study_from_the_file_and_names_a_missing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study, _ = _study(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["nightly", "history", "-f", str(study)])
    assert exited.value.code != 0
    assert "no study named 'prod'" in capsys.readouterr().err


def test_without_a_file_or_study_it_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["nightly", "history"])
    assert exited.value.code != 0
    assert "fix: --study NAME, or --file" in capsys.readouterr().err
