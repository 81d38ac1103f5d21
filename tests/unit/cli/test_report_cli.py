"""``autotune report`` with a study that does not exist is bad input: exit 2, as elsewhere (issue 30)."""

from __future__ import annotations

import signal
from pathlib import Path

import optuna
import pytest

from autotune.cli import main


def _run(argv: list[str]) -> int:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(SystemExit) as info:
            main(argv)
    finally:  # main() installs process-wide signal handlers
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return int(info.value.code or 0)


def test_report_of_a_study_that_does_not_exist_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["report", "--study", "no-such", "--studies-dir", str(tmp_path)]) == 2
    assert "no study named 'no-such'" in capsys.readouterr().err

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = tmp_path / "one.db"
    optuna.create_study(study_name="real", storage=f"sqlite:///{db}")
    assert _run(["report", "--study", "no-such", "--storage", f"sqlite:///{db}"]) == 2
    assert "known: real" in capsys.readouterr().err
