from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.workload import ChatMessage, load_workload, sample_workload, write_jsonl

GOOD = '{"prompt": "hello there", "max_tokens": 4}'
CHAT = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'


def test_loads_prompt_chat_sessions_and_alias(data_dir: Path) -> None:
    w = load_workload(data_dir / "chat_sessions.jsonl")

    assert [r.id for r in w.requests] == ["a1", "b1", "a2", "c1"]
    assert [r.index for r in w.requests] == [0, 1, 2, 3]
    a2 = w.requests[2]
    assert a2.is_chat and a2.session_id == "alice" and a2.think_time == 1.5 and a2.line == 3
    assert a2.messages is not None and a2.messages[2] == ChatMessage("assistant", "Sorry to hear that.")
    c1 = w.requests[3]
    assert c1.prompt == "Complete this sentence: the cache" and c1.max_tokens == 8  # output_tokens alias
    assert w.has_timestamps
    assert [len(turns) for turns in w.sessions().values()] == [2, 1, 1]


def test_defaults_and_blank_lines(write_lines: Callable[..., Path]) -> None:
    w = load_workload(write_lines("", GOOD, "   ", CHAT))

    assert [(r.id, r.line) for r in w.requests] == [("line-2", 2), ("line-4", 4)]
    assert w.requests[0].timestamp is None and w.requests[0].think_time == 0.0
    assert not w.has_timestamps and w.skipped == ()


@pytest.mark.parametrize(
    ("line", "field", "fragment"),
    [
        ('{"prompt": "x", "max_tokens": "abc"}', "max_tokens", "must be an integer >= 1, got 'abc'"),
        ('{"prompt": "x", "max_tokens": 0}', "max_tokens", "got 0"),
        ('{"prompt": "x", "max_tokens": 2.5}', "max_tokens", "got 2.5"),
        ('{"prompt": "x"}', "max_tokens", "missing"),
        ('{"prompt": "x", "output_tokens": -3}', "output_tokens", "got -3"),
        ('{"prompt": "x", "max_tokens": 3, "output_tokens": 3}', "output_tokens", "keep only max_tokens"),
        ('{"prompt": 7, "max_tokens": 3}', "prompt", "must be a string"),
        ('{"max_tokens": 3}', "prompt", "neither prompt nor messages"),
        (
            '{"prompt": "x", "messages": [{"role": "user", "content": "y"}], "max_tokens": 3}',
            "prompt",
            "both",
        ),
        ('{"messages": [], "max_tokens": 3}', "messages", "non-empty list"),
        ('{"messages": "hi", "max_tokens": 3}', "messages", "non-empty list"),
        ('{"messages": ["hi"], "max_tokens": 3}', "messages[0]", "object with role and content"),
        ('{"messages": [{"role": "bot", "content": "y"}], "max_tokens": 3}', "messages[0].role", "'bot'"),
        ('{"messages": [{"role": "user", "content": 5}], "max_tokens": 3}', "messages[0].content", "string"),
        ('{"messages": [{"role": "user"}], "max_tokens": 3}', "messages[0].content", "missing"),
        (
            '{"messages": [{"role": "user", "content": "y", "name": "z"}], "max_tokens": 3}',
            "messages[0].name",
            "unknown",
        ),
        ('{"prompt": "x", "max_tokens": 3, "timestamp": -1}', "timestamp", "must be a number >= 0"),
        ('{"prompt": "x", "max_tokens": 3, "timestamp": "soon"}', "timestamp", "got 'soon'"),
        ('{"prompt": "x", "max_tokens": 3, "think_time": -0.5}', "think_time", "must be a number >= 0"),
        ('{"prompt": "x", "max_tokens": 3, "id": 12}', "id", "must be a string"),
        ('{"prompt": "x", "max_tokens": 3, "session_id": ["s"]}', "session_id", "must be a string"),
        ('{"prompt": "x", "max_tokens": 3, "temperature": 0.7}', "temperature", "unknown key"),
        ('{"prompt": "x", "max_token": 3}', "max_token", "did you mean 'max_tokens'?"),
        ('{"prompt": "x", "max_tokens": 3', "json", "invalid JSON"),
        ('["prompt", 3]', "json", "expected an object, got list"),
    ],
)
def test_each_bad_field_is_one_line_naming_file_line_and_field(
    write_lines: Callable[..., Path], line: str, field: str, fragment: str
) -> None:
    path = write_lines(GOOD, line, name="rag.jsonl")

    with pytest.raises(WorkloadError) as info:
        load_workload(path)

    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:2: {field}: ")
    assert fragment in message
    assert message.endswith(")")  # every message ends with its fix


def test_unknown_key_lists_allowed_keys(write_lines: Callable[..., Path]) -> None:
    with pytest.raises(WorkloadError, match=r"allowed keys: id, max_tokens, messages, output_tokens, prompt"):
        load_workload(write_lines('{"prompt": "x", "max_tokens": 3, "stream": true}'))


def test_example_message_from_the_docs(tmp_path: Path) -> None:
    path = tmp_path / "rag.jsonl"
    path.write_text(GOOD + "\n" * 6 + '{"prompt": "x", "max_tokens": "abc"}\n')

    with pytest.raises(WorkloadError) as info:
        load_workload(path)

    assert str(info.value) == (
        f"{path}:7: max_tokens: must be an integer >= 1, got 'abc' "
        "(set max_tokens to the number of output tokens to generate)"
    )


def test_duplicate_ids(write_lines: Callable[..., Path]) -> None:
    path = write_lines(
        '{"id": "q", "prompt": "a", "max_tokens": 1}', GOOD, '{"id": "q", "prompt": "b", "max_tokens": 1}'
    )

    with pytest.raises(WorkloadError, match=r":3: id: duplicate id 'q', first used on line 1"):
        load_workload(path)


def test_default_id_collides_with_explicit_id(write_lines: Callable[..., Path]) -> None:
    with pytest.raises(WorkloadError, match=r":2: id: duplicate id 'line-2'"):
        load_workload(write_lines('{"id": "line-2", "prompt": "a", "max_tokens": 1}', GOOD))


def test_session_turns_must_be_ordered_in_time(write_lines: Callable[..., Path]) -> None:
    path = write_lines(
        '{"session_id": "s", "timestamp": 5, "prompt": "a", "max_tokens": 1}',
        '{"session_id": "t", "timestamp": 1, "prompt": "b", "max_tokens": 1}',  # other sessions may go back
        '{"session_id": "s", "timestamp": 4, "prompt": "c", "max_tokens": 1}',
    )

    with pytest.raises(
        WorkloadError, match=r":3: timestamp: 4.0 is earlier than the previous turn of session 's'"
    ):
        load_workload(path)


def test_timestamps_all_or_none(write_lines: Callable[..., Path]) -> None:
    path = write_lines('{"timestamp": 0, "prompt": "a", "max_tokens": 1}', GOOD)

    with pytest.raises(WorkloadError, match=r":2: timestamp: missing, but line 1 has one"):
        load_workload(path)


def test_missing_empty_and_directory(tmp_path: Path, write_lines: Callable[..., Path]) -> None:
    with pytest.raises(WorkloadError, match=r"nope.jsonl: file not found"):
        load_workload(tmp_path / "nope.jsonl")
    with pytest.raises(WorkloadError, match=r": no requests \(the file is empty"):
        load_workload(write_lines("", "  "))
    with pytest.raises(WorkloadError, match=r"is a directory"):
        load_workload(tmp_path)


def test_skip_bad_lines_records_every_skip(write_lines: Callable[..., Path]) -> None:
    path = write_lines(
        GOOD,
        "{oops",
        '{"prompt": "x", "max_tokens": 0}',
        CHAT,
        '{"id": "line-1", "prompt": "x", "max_tokens": 1}',
    )

    w = load_workload(path, skip_bad_lines=True)

    assert [r.line for r in w.requests] == [1, 4]
    assert [r.index for r in w.requests] == [0, 1]
    assert len(w.skipped) == 3
    assert [s.split(": ")[0] for s in w.skipped] == [f"{path}:2", f"{path}:3", f"{path}:5"]
    assert "max_tokens" in w.skipped[1] and "duplicate id" in w.skipped[2]


def test_skip_bad_lines_still_fails_when_nothing_is_left(write_lines: Callable[..., Path]) -> None:
    with pytest.raises(WorkloadError, match=r"every line is invalid \(2 skipped; first: .*:1: json"):
        load_workload(write_lines("{", '{"prompt": 1}'), skip_bad_lines=True)


def _session_workload(tmp_path: Path) -> Path:
    records = []
    for s in range(6):
        for t in range(s % 3 + 1):
            records.append({"id": f"s{s}t{t}", "session_id": f"s{s}", "prompt": "p", "max_tokens": 1})
    records.append({"id": "lone", "prompt": "q", "max_tokens": 1})
    path = tmp_path / "sessions.jsonl"
    write_jsonl(records, path)
    return path


def test_sample_keeps_whole_sessions_in_order(tmp_path: Path) -> None:
    w = load_workload(_session_workload(tmp_path))

    sample = sample_workload(w, 5, seed=1)

    assert 1 <= len(sample) <= 5
    assert [r.index for r in sample.requests] == list(range(len(sample)))
    assert [r.line for r in sample.requests] == sorted(r.line for r in sample.requests)
    full = {k: len(v) for k, v in w.sessions().items()}
    for turns in sample.sessions().values():
        if turns[0].session_id is not None:
            assert len(turns) == full[turns[0].session_id]


def test_sample_is_reproducible_and_seed_dependent(tmp_path: Path) -> None:
    w = load_workload(_session_workload(tmp_path))

    ids = {seed: [r.id for r in sample_workload(w, 6, seed=seed).requests] for seed in range(8)}

    assert ids[3] == [r.id for r in sample_workload(w, 6, seed=3).requests]
    assert len({tuple(v) for v in ids.values()}) > 1
    assert sample_workload(w, 100, seed=0) is w


def test_sample_rejects_nonpositive(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="sample size"):
        sample_workload(load_workload(_session_workload(tmp_path)), 0, seed=0)


def test_write_jsonl_round_trips_unicode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "u.jsonl"
    n = write_jsonl([{"prompt": "héllo 世界", "max_tokens": 3}], path)

    assert n == 1
    assert json.loads(path.read_text(encoding="utf-8"))["prompt"] == "héllo 世界"
    assert load_workload(path).requests[0].prompt == "héllo 世界"
