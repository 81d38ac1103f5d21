"""What one night says and leaves behind, against the fake server: its plan first, one arm when
the incumbent is the baseline, the reason when no candidate ran, counts that agree, and a report
of the study after it (one night, shared by the tests of this module)."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

from tests.conftest import wait_no_processes
from tests.e2e.test_cli import _run
from tests.e2e.test_nightly import _env, _night


@dataclass(frozen=True)
class Night:
    dir: Path
    mark: str
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Night]:
    """A fresh study's first night with the search off (--max-trials 0), 2 rounds."""
    tmp = tmp_path_factory.mktemp("night")
    mark = uuid.uuid4().hex
    result = _run(_night(tmp, max_trials=0, budget="5m"), mark, tmp, env=_env(mark))
    yield Night(tmp, mark, result)
    assert not wait_no_processes(mark), "engine processes outlived the night"


def _study(tmp: Path) -> optuna.Study:
    return optuna.load_study(study_name="prod", storage=f"sqlite:///{tmp / 'studies' / 'prod.db'}")


def _record(tmp: Path) -> dict:
    (rec,) = [v for k, v in _study(tmp).user_attrs.items() if k.startswith("night:")]
    return rec


def test_the_plan_comes_first_and_the_baseline_incumbent_is_measured_as_one_arm(night: Night) -> None:
    assert night.result.returncode == 0, night.result.stderr
    out = night.result.stderr  # progress goes to stderr, the night's paragraph to stdout
    assert "plan: 5.0 min at" in out and out.index("plan: 5.0 min at") < out.index(" round 1: "), out
    assert "2 round(s) of 1 arm(s) (incumbent (baseline))" in out
    runs = re.findall(r"^\s+(.+?) round (\d+): ", out, flags=re.MULTILINE)
    assert runs == [("incumbent (baseline)", "1"), ("incumbent (baseline)", "2")], runs
    rec = _record(night.dir)
    assert rec["baseline_figure"] == rec["incumbent_figure"] and len(rec["incumbent_figure"]["runs"]) == 2


def test_the_reason_says_no_candidate_ran_and_why(night: Night) -> None:
    rec = _record(night.dir)
    assert rec["decision"] == "kept"
    assert rec["reason"] == "no candidate ran: --max-trials 0 turned the search off"
    assert (
        "Kept the incumbent: no candidate ran: --max-trials 0 turned the search off." in night.result.stdout
    )


def test_the_trial_counts_agree_between_paragraph_history_and_study(night: Night) -> None:
    tagged = [t for t in _study(night.dir).trials if t.user_attrs.get("night") == 1 and t.state.is_finished()]
    assert len(tagged) == 1  # the study's baseline, measured as round 1 of the re-measurement
    assert _record(night.dir)["trials"] == 1
    assert "1 trial(s) tonight" in night.result.stdout
    history = _run(
        ["nightly", "history", "--study", "prod", "--studies-dir", str(night.dir / "studies")],
        night.mark,
        night.dir,
    )
    assert history.returncode == 0, history.stderr
    assert "1 trial(s) tonight" in history.stdout, history.stdout  # one line per night, the study's count


def test_report_study_works_after_a_night_and_shows_it(night: Night) -> None:
    target = night.dir / "report.html"
    r = _run(
        ["report", "--study", "prod", "--studies-dir", str(night.dir / "studies"), "--out", str(target)],
        night.mark,
        night.dir,
    )
    assert r.returncode == 0, r.stderr
    page = target.read_text()
    for shown in ("Night 1", "Plan", "re-measurement", "Candidates", "no candidate ran: --max-trials 0"):
        assert shown in page, shown


def test_the_nights_pages_share_one_plotly_js_beside_them(night: Night) -> None:
    """Each night's report and the index load plotly.js from one file in the study's folder (still
    offline) instead of carrying its 4.8 MB each."""
    sdir = night.dir / "studies" / "prod"
    shared = sdir / "plotly.min.js"
    assert shared.stat().st_size > 1_000_000
    pages = [sdir / "nights.html", *sorted(sdir.glob("night-*/report.html"))]
    assert len(pages) == 2, pages
    for page in pages:
        text = page.read_text()
        assert page.stat().st_size < 500_000, (page, page.stat().st_size)  # no plotly.js inline
        src = re.findall(r'<script type="text/javascript" src="([^"]+)"></script>', text)
        if 'class="plot"' in text:  # a page that draws loads the shared copy, by a relative path
            assert src and (page.parent / src[0]).resolve() == shared.resolve(), (page, src)
