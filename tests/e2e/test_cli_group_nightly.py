"""``autotune nightly -f group.yaml`` on the fake server: after ``run`` exported a group into a
folder, a night re-measures that deployed group against tonight's baseline group, searches, and
promotes all models or none (the replaced files kept, --on-promote given the folder), its plan printed first; the next
night holds the promoted group as its incumbent; a deployed file changed by hand is refused before
any engine starts; ``nightly history`` prints the group's nights. No engine outlives a command."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import ConfigError
from autotune.nightly import nights
from autotune.tiny_model import make_tiny_model
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, write_fake_space


@pytest.fixture
def group(tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(MARK_ENV, mark)
    monkeypatch.setenv("FAKE_TTFT_SCALE", "5")
    l8, l2 = make_tiny_model(tmp_path / "l8", layers=8), make_tiny_model(tmp_path / "l2", layers=2)
    space = write_fake_space(tmp_path)
    path = tmp_path / "group.yaml"
    path.write_text(f"""\
models:
  - {{name: rag, model: {l8}, workload: {REPO / "examples" / "rag.jsonl"}, space: {space}}}
  - {{name: chat, model: {l2}, workload: {REPO / "examples" / "support_chat.jsonl"}, space: {space}}}
share: {{kv_cache_memory_bytes: 64M}}
engine_args: [--max-model-len=2048]
study: g
launcher: {" ".join(FAKE_LAUNCHER)}
check_args: false
max_requests: 8
warmup: 0
speed: 4
""")
    return path


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="g", storage=f"sqlite:///{tmp_path / 'studies' / 'g.db'}")


def test_nights_of_a_group_remeasure_the_deployed_group_search_and_promote_all_or_none(
    group: Path, tmp_path: Path, mark: str
) -> None:
    studies, export = tmp_path / "studies", tmp_path / "deployed"
    common = ["--studies-dir", str(studies), "--out", str(export)]
    ran = CliRunner().invoke(
        app, ["run", "-f", str(group), *common, "--n-trials", "2", "--confirm-rounds", "0"]
    )
    assert ran.exit_code == 0, f"{ran.output}\n{ran.exception!r}"
    deployed = _study(tmp_path).user_attrs["group_deployed"]
    assert set(deployed["files"]) == {"rag.yaml", "chat.yaml", "launch.sh"}
    before = {p.name: p.read_bytes() for p in export.iterdir() if p.is_file()}

    hook = f"echo $AUTOTUNE_NEW_CONFIG $AUTOTUNE_NIGHT > {tmp_path / 'hook.txt'}"
    night = ["nightly", "-f", str(group), *common, "--budget", "60m", "--rounds", "1", "--max-trials", "1",
             "--min-improvement", "0.05", "--on-promote", hook]  # fmt: skip
    first = CliRunner().invoke(app, night)
    assert first.exit_code == 0, f"{first.output}\n{first.exception!r}"
    assert "Group night 1:" in first.output and "re-measuring the baseline group" in first.output
    # one night for N >= 1 engines: the group's plan comes first, as one engine's does
    assert first.output.index("plan: 60.0 min at") < first.output.index("re-measuring the baseline group")
    n1 = nights(_study(tmp_path))[0]
    assert n1.group is not None and n1.group["incumbent_trial"] == deployed["trial"]
    # a budget that holds the search on a busy CI host too (it once read no room at 20 min there)
    assert n1.trials == 1 and len(n1.group["trial_numbers"]) == 1 and n1.run_costs, first.output
    assert n1.decision in ("promoted", "kept"), n1
    after = {p.name: p.read_bytes() for p in export.iterdir() if p.is_file()}
    if n1.decision == "promoted":  # all models or none: every file replaced, the old ones kept
        assert after != before and (tmp_path / "hook.txt").read_text().split() == [str(export), "1"]
        kept = studies / "g" / "group-history" / "night-0001"
        assert {p.name: p.read_bytes() for p in kept.iterdir()} == before
        assert _study(tmp_path).user_attrs["group_deployed"]["trial"] == n1.promoted_trial == n1.group["best"]
    else:
        assert after == before and not (tmp_path / "hook.txt").exists()

    second = CliRunner().invoke(app, [*night, "--max-trials", "0"])
    assert second.exit_code == 0, f"{second.output}\n{second.exception!r}"
    n2 = nights(_study(tmp_path))[1]
    assert (
        n2.group is not None
        and n2.group["incumbent_trial"] == _study(tmp_path).user_attrs["group_deployed"]["trial"]
    )
    assert n2.trials == 0 and n2.decision == "kept" and n2.changes == []
    history = CliRunner().invoke(app, ["nightly", "history", "--study", "g", "--studies-dir", str(studies)])
    assert history.exit_code == 0 and "nights of group study g" in history.output, history.output

    (export / "rag.yaml").write_text((export / "rag.yaml").read_text() + "max-num-seqs: 3\n")
    edited = CliRunner().invoke(app, night)
    assert isinstance(edited.exception, ConfigError), edited.output
    assert "rag.yaml: the deployed group's file differs" in str(edited.exception)
    assert len(nights(_study(tmp_path))) == 2  # refused before the night began
    assert not processes_marked(mark)
