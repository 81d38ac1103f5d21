"""``autotune report`` of a group study: the group's trials with their splits and objective, the
split over trials, one section per model with its own figures, from what the group study loop
records (tests/unit/report/group_study.py)."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import ConfigError, StorageError
from autotune.report import is_group_study, write_group_report
from tests.conftest import REPO
from tests.unit.report.group_study import make_group_study


@pytest.fixture(scope="module")
def group_study(tmp_path_factory: pytest.TempPathFactory) -> optuna.Study:
    return make_group_study(tmp_path_factory.mktemp("group-report"))


def _rows(html: str, table_id: str) -> list[list[str]]:
    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.split("<tbody>", 1)[1])
    ]


def test_a_group_report_has_the_trials_the_split_and_a_section_per_model(
    group_study: optuna.Study, tmp_path: Path
) -> None:
    assert is_group_study(group_study)
    html = write_group_report(group_study, tmp_path / "g.html").read_text()
    trials = _rows(html, "group-table")
    assert [r[0] for r in trials] == ["0", "1", "2", "3"]
    assert [r[1] for r in trials[:2]] == ["baseline", "prior"]
    # columns: #, kind, status, rag share, chat share, group objective, rag ratio, chat ratio, reason
    assert trials[0][3:6] == ["0.500", "0.500", "1.000"]  # the baseline group scores 1.0
    assert trials[1][3:5] == ["0.700", "0.300"] and float(trials[1][5]) < 1.0  # rag's share bought it time
    failed, infeasible = trials[2], trials[3]
    assert failed[3] == "0.800" and failed[2] == "failed" and failed[5] == "-"
    assert "chat: engine exited" in failed[-1]
    assert infeasible[3] == "0.950" and infeasible[2] == "infeasible" and "before launch" in infeasible[-1]
    for name in ("rag", "chat"):
        assert f'id="model-{name}"' in html and f'id="plot-model-{name}"' in html
    rag = _rows(html, "model-table-rag")
    assert rag[0][2] == "0.500" and rag[0][4] == "240.00" and rag[1][4] == f"{120 / 0.7:,.2f}"
    chat = _rows(html, "model-table-chat")
    assert chat[2][2] == "0.200" and chat[2][3] == "failed" and "engine exited" in chat[2][-1]
    assert 'id="plot-split"' in html and "weight 2" in html  # the fingerprint's facts in the summary
    assert "re-measured trial 1" in html and "confirmed: group objective 0.71" in html


def test_report_command_writes_a_group_studys_page_and_refuses_a_workload(
    group_study: optuna.Study, tmp_path: Path
) -> None:
    studies = Path(group_study.user_attrs["studies_dir"])
    args = ["report", "--study", "g", "--studies-dir", str(studies), "-o", str(tmp_path / "r.html")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Model rag" in (tmp_path / "r.html").read_text()
    res = CliRunner().invoke(app, [*args, "--workload", str(REPO / "examples" / "rag.jsonl")])
    assert isinstance(res.exception, ConfigError), res.output  # one line, exit 1 (autotune's main)
    assert "is a group study" in str(res.exception) and "fix: drop --workload" in str(res.exception)


def test_a_group_study_with_no_finished_trial_says_so(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="empty", storage=f"sqlite:///{tmp_path / 'e.db'}")
    study.set_user_attr("group_fingerprint", {})
    with pytest.raises(StorageError, match="no finished group trial"):
        write_group_report(study, tmp_path / "e.html")


def test_show_prints_a_group_studys_trials_and_export_points_to_run(group_study: optuna.Study) -> None:
    studies = group_study.user_attrs["studies_dir"]
    shown = CliRunner().invoke(app, ["show", "--study", "g", "--studies-dir", studies], terminal_width=250)
    assert shown.exit_code == 0, shown.output
    assert "group study g" in shown.output and "split rag/chat" in shown.output
    rows = [ln for ln in shown.output.splitlines() if ln.startswith("│ ") and ln[2].isdigit()]
    assert [r.split("│")[2].strip() for r in rows] == ["baseline", "prior", "sampled", "sampled"]
    assert "0.70/0.30" in rows[1] and "171.4 ms (0.714)" in rows[1] and "vLLM defaults" not in shown.output
    refused = CliRunner().invoke(app, ["export", "--study", "g", "--studies-dir", studies])
    assert isinstance(refused.exception, ConfigError), refused.output
    assert "autotune run -f GROUP.yaml --study g --n-trials 0" in str(refused.exception)
