"""The group use case called as a function, without the CLI (:func:`autotune.usecases.run_group`): a
group file's dry run returns its outcome and shows every engine's command to the reporter; nothing
reaches a console and nothing is launched."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune import usecases
from autotune.errors import EXIT_NO_BASELINE
from autotune.studyfile import GroupFile, load_group_file
from tests.conftest import write_two_model_group


def _group(tmp_path: Path, kv: str) -> GroupFile:
    group = load_group_file(write_two_model_group(tmp_path, kv))
    assert isinstance(group, GroupFile)
    return group


@pytest.mark.parametrize(("kv", "code"), [("48M", 0), ("2M", EXIT_NO_BASELINE)])
def test_a_group_dry_run_returns_its_code_and_shows_each_engine_without_a_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], kv: str, code: int
) -> None:
    said = usecases.Transcript()
    outcome = usecases.run_group(
        _group(tmp_path, kv), {"dry_run": True, "dry_run_samples": 1, "check_args": False}, said
    )
    assert outcome.exit_code == code and outcome.export is None
    shown = [str(line) for line in said.shown]
    assert shown[0].startswith("# a group of 2 models on one server (rag, chat)"), shown
    assert (
        sum("vllm.entrypoints.openai.api_server" in line for line in shown) == 2 * 3
    )  # baseline, prior, sample
    assert any(line.startswith("\n# dry run: nothing was launched") for line in shown)
    if code:  # a budget too small for the equal split: the baseline group cannot run, said before launch
        assert "INFEASIBLE before launch" in "\n".join(shown)
    captured = capfd.readouterr()
    assert "# a group of" not in captured.out + captured.err
