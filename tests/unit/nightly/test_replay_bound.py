"""The shipped nightly study on a capture folder of two days plans a bounded replay: yesterday's
files, and one engine run's replay at most a tenth of the night's budget."""

from __future__ import annotations

from pathlib import Path

from autotune.nightly import bound_night_replay
from autotune.studyfile import load_study_file, parse_duration, resolve_spec
from autotune.workload import load_traffic, write_jsonl
from tests.conftest import REPO

SHIPPED = REPO / "docker" / "study" / "nightly.yaml"


def _hourly_files(folder: Path, hours: int = 48) -> None:
    """Hourly capture files from 2026-12-01T00: 60 sessions of 2 turns an hour, over the whole hour."""
    for h in range(hours):
        day, hour = divmod(h, 24)
        rows = [
            {
                "session_id": f"h{h}-s{s}",
                "timestamp": 60.0 * s + 30.0 * turn,
                "messages": [{"role": "user", "content": f"hour {h} session {s} turn {turn}"}],
                "max_tokens": 8,
            }
            for s in range(60)
            for turn in range(2)
        ]
        write_jsonl(
            sorted(rows, key=lambda r: r["timestamp"]),
            folder / f"traffic-202612{1 + day:02d}T{hour:02d}.jsonl",
        )


def _night(folder: Path, **flags: object):
    return resolve_spec("nightly", flags={"workload": folder, **flags}, file=load_study_file(SHIPPED))


def test_the_shipped_study_on_48_hourly_files_replays_yesterday_within_a_tenth_of_the_budget(
    tmp_path: Path,
) -> None:
    _hourly_files(tmp_path)
    spec = _night(tmp_path, budget="2h")
    assert spec.window is None and spec.max_duration is None  # the shipped file sets no bound itself
    bounded = bound_night_replay(spec)
    assert bounded.spec.window == "24h"
    cap = parse_duration(bounded.spec.max_duration or "")
    assert cap == 0.10 * 2 * 3600 / 1.5  # passes auto: a run replays at most 1.5 passes
    assert bounded.line is not None and "24 of 48 files" in bounded.line and "480 s" in bounded.line
    wl = load_traffic(
        tmp_path, window_s=parse_duration(bounded.spec.window), max_duration_s=cap, seed=bounded.spec.seed
    )
    hours = {int(r.session_id.split("-")[0][1:]) for r in wl.requests if r.session_id}
    assert hours and min(hours) >= 24  # yesterday's files only
    assert max(r.timestamp or 0.0 for r in wl.requests) <= cap  # a bounded replay, not a day at 1x
    assert all(
        len([r for r in wl.requests if r.session_id == s]) == 2 for s in {r.session_id for r in wl.requests}
    )


def test_a_bound_the_user_set_is_kept_and_a_file_is_never_bounded(tmp_path: Path) -> None:
    _hourly_files(tmp_path, hours=3)
    spec = _night(tmp_path, budget="1h", window="2h", max_duration="20m", passes="2")
    assert bound_night_replay(spec).spec == spec and bound_night_replay(spec).line is None
    spec = _night(tmp_path, budget="1h", passes="2", speed=2.0)
    bounded = bound_night_replay(spec)
    assert bounded.spec.max_duration == "360s"  # 10% of 1h, at speed 2, over 2 passes
    assert "3 of 3 files" in (bounded.line or "")
    one_file = _night(tmp_path / "traffic-20261201T00.jsonl", budget="1h")
    assert bound_night_replay(one_file).spec == one_file
