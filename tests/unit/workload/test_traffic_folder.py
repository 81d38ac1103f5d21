"""A folder of hourly traffic files becomes one workload: windowed, sampled by whole sessions, with
the arrival-rate curve kept."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import WorkloadError
from autotune.workload import TrafficStats, describe_change, load_traffic, traffic_stats, write_jsonl


def _day(folder: Path, hours: int = 30, seed: int = 0) -> None:
    """Hourly files from 2026-12-01T00; busy hours 9-17 get five times the sessions; 3 turns each."""
    rng = random.Random(seed)
    for h in range(hours):
        day, hour = divmod(h, 24)
        sessions = 20 if 9 <= hour <= 17 else 4
        records = []
        for s in range(sessions):
            start = rng.uniform(0, 3000)
            sid = f"h{h}-s{s}"
            for turn in range(3):
                records.append(
                    {
                        "session_id": sid,
                        "timestamp": start + 200 * turn,
                        "messages": [{"role": "user", "content": f"hello {sid} turn {turn}"}],
                        "max_tokens": 8,
                    }
                )
        records.sort(key=lambda r: r["timestamp"])
        write_jsonl(records, folder / f"traffic-202612{1 + day:02d}T{hour:02d}.jsonl")


def _hour_shares(times: list[float], duration: float, bins: int = 24) -> np.ndarray:
    counts = np.histogram(times, bins=bins, range=(0, duration))[0]
    return counts / counts.sum()


def test_window_keeps_the_latest_files(tmp_path: Path) -> None:
    _day(tmp_path)

    w = load_traffic(tmp_path, window_s=24 * 3600)

    ids = {r.session_id.split("-")[0] for r in w.requests if r.session_id}
    assert ids == {f"h{h}" for h in range(6, 30)}  # 30 files, the latest 24 kept
    assert w.requests[0].timestamp == 0.0
    assert all(a.timestamp <= b.timestamp for a, b in zip(w.requests, w.requests[1:], strict=False))  # type: ignore[operator]


def test_max_requests_keeps_whole_sessions_and_the_rate_curve(tmp_path: Path) -> None:
    _day(tmp_path, hours=24)
    day = load_traffic(tmp_path)

    sample = load_traffic(tmp_path, max_requests=300, seed=1)

    assert 250 <= len(sample) <= 300
    turns = Counter(r.session_id for r in sample.requests)
    assert set(turns.values()) == {3}  # whole sessions only
    day_end = max(r.timestamp or 0 for r in day.requests)
    scale = len(sample) / len(day)
    busy_day = _hour_shares([r.timestamp or 0 for r in day.requests], day_end)
    busy_sample = _hour_shares([r.timestamp or 0 for r in sample.requests], day_end * scale)
    assert np.abs(busy_day - busy_sample).sum() < 0.35  # same shape (L1 distance of hourly shares)
    assert busy_sample[9:18].sum() > 0.7  # the busy hours stay busy
    day_rate = len(day) / day_end
    sample_rate = len(sample) / max(r.timestamp or 0 for r in sample.requests)
    assert sample_rate == pytest.approx(day_rate, rel=0.1)  # the same level: starts moved closer


def test_max_duration_shortens_the_replay_and_is_seeded(tmp_path: Path) -> None:
    _day(tmp_path, hours=24)

    a = load_traffic(tmp_path, max_duration_s=3600, seed=3)
    b = load_traffic(tmp_path, max_duration_s=3600, seed=3)

    assert [r.id for r in a.requests] == [r.id for r in b.requests]
    assert max(r.timestamp or 0 for r in a.requests) < 3600 * 1.2
    assert len(a) < len(load_traffic(tmp_path)) / 10


def test_bad_input_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no traffic files"):
        load_traffic(tmp_path)
    _day(tmp_path, hours=1)
    (tmp_path / "traffic-20261201T01.jsonl").write_text('{"prompt": "x", "max_tokens": 0}\n')
    with pytest.raises(WorkloadError, match=r"traffic-20261201T01.jsonl:1: max_tokens"):
        load_traffic(tmp_path)
    with pytest.raises(WorkloadError, match="max_requests: 0"):
        load_traffic(tmp_path, max_requests=0)


def test_describe_change_names_what_moved(tmp_path: Path) -> None:
    old = TrafficStats(
        requests=1000,
        sessions=300,
        prompt_tokens=500_000,
        prefix_reuse=0.40,
        working_set_tokens=80_000,
        block_size=16,
        duration_s=86400.0,
    )
    new = TrafficStats(
        requests=1500,
        sessions=310,
        prompt_tokens=520_000,
        prefix_reuse=0.55,
        working_set_tokens=160_000,
        block_size=16,
        duration_s=86400.0,
    )

    lines = describe_change(old.as_dict(), new)

    assert lines == [
        "requests 1,000 -> 1,500 (+50%)",
        "working set 80,000 tokens -> 160,000 tokens (+100%)",
        "prefix reuse 40.0% -> 55.0% (+15.0 points)",
    ]
    assert describe_change(new, new) == []
    _day(tmp_path, hours=2)
    stats = traffic_stats(load_traffic(tmp_path))
    assert (stats.requests, stats.sessions) == (24, 8)
