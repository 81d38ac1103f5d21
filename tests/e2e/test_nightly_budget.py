"""A night whose budget cannot hold one candidate exits 8 (not 0: cron and alerting must see it), and
its last line names the budget its plan needs, at the costs measured tonight. The summary's time is
the wall time from the process start."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.test_cli import _run
from tests.e2e.test_nightly import _env, _night, _nights


def test_a_night_too_short_for_one_candidate_exits_8_naming_the_budget_it_needs(
    tmp_path: Path, mark: str
) -> None:
    r = _run(_night(tmp_path, budget="5s", max_trials=None), mark, tmp_path, env=_env(mark))
    assert r.returncode == 8, (r.stdout, r.stderr)
    last = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(
        r"budget: 0\.1 min could not hold one candidate; at tonight's measured costs the plan needs "
        r"(\d+\.\d) min \(fix: --budget (\d+)m or more\)",
        last,
    )
    assert m, last
    (night,) = _nights(tmp_path)
    assert night["decision"] == "kept" and night["budget_needed_s"] > 5
    assert int(m[2]) * 60 >= night["budget_needed_s"]
    assert "(wall time from the start)" in r.stdout


def test_a_night_that_ran_a_candidate_is_not_exit_8(tmp_path: Path, mark: str) -> None:
    r = _run(_night(tmp_path, budget="60s", max_trials=2), mark, tmp_path, env=_env(mark))
    assert r.returncode == 0, (r.stdout, r.stderr)
    (night,) = _nights(tmp_path)
    assert night["budget_needed_s"] is None and not r.stdout.strip().splitlines()[-1].startswith("budget:")
