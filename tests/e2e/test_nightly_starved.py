"""A night whose fixed flags leave no room (the real 4-night series' night 3, on the fake server): every
candidate is refused before launch, so the search stops early (20 of them in a row, or 5 reused twins in
a row) and says why, instead of spinning through hundreds (the CPU build's series ran 663 such trials in one night), and the night exits 3, the
regression alarm, although nothing ran feasibly either (exit 4 is for a night with no regression)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_cli import _run
from tests.e2e.test_nightly import _env, _night, _nights


def test_a_night_with_no_room_stops_searching_and_raises_the_regression_alarm(
    tmp_path: Path, mark: str
) -> None:
    r1 = _run(_night(tmp_path, max_trials=2), mark, tmp_path, env=_env(mark))
    assert r1.returncode == 0, r1.stderr
    # 1 MiB of KV cannot hold one 4,096-token request of the model: refused before launch, every one
    starved = (
        "--check-memory",
        "--engine-arg=--kv-cache-memory-bytes=1M",
        "--engine-arg=--max-model-len=4096",
    )
    r2 = _run(_night(tmp_path, *starved, budget="3m", max_trials=None), mark, tmp_path, env=_env(mark))
    assert r2.returncode == 3, (r2.stdout, r2.stderr)
    assert "REGRESSION" in r2.stdout and "environment.fixed_flags" in r2.stdout
    # the search stops early and says why: 20 candidates in a row that started no engine, or (tonight's
    # refused twins being reused) the sampler proposing what tonight measured 5 times in a row
    assert "stopped the search: " in r2.stderr, r2.stderr
    night = _nights(tmp_path)[-1]
    assert night["decision"] == "nothing_feasible"
    assert night["trials"] <= 25, night["trials"]  # 20 refused in a row, the plan's arms besides
