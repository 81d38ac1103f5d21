"""Lines that vLLM's server would refuse (issue 30, item 2) are refused when the workload is loaded,
each with one line naming the file, the line, the request, the value and the fix; lines that are
not UTF-8 are named by their line (item 9)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.workload import load_workload

GOOD = '{"id": "q1", "prompt": "what is a prefix cache?", "max_tokens": 16}'


@pytest.mark.parametrize(
    ("line", "fragments"),
    [
        (
            '{"id":"q-empty","timestamp":0.5,"prompt":"","max_tokens":16}',
            ("prompt: no text", "'q-empty'", "''"),
        ),
        ('{"prompt": "   \\n ", "max_tokens": 4}', ("prompt: no text", "got '   \\n '")),
        ('{"id": "c", "messages": [], "max_tokens": 4}', ("messages: must be a non-empty list", "got []")),
        (
            '{"id": "c2", "messages": [{"role": "system", "content": ""}, {"role": "user", "content": " "}], '
            '"max_tokens": 4}',
            ("messages: no message has text", "'c2'", "['', ' ']"),
        ),
    ],
)
def test_a_request_vllm_would_refuse_is_one_located_line(
    write_lines: Callable[..., Path], line: str, fragments: tuple[str, ...]
) -> None:
    path = write_lines(GOOD, line, GOOD.replace("q1", "q3"), name="rag.jsonl")

    with pytest.raises(WorkloadError) as info:
        load_workload(path)

    message = str(info.value)
    assert info.value.exit_code == 2
    assert "\n" not in message
    assert message.startswith(f"{path}:2: ")
    for fragment in fragments:
        assert fragment in message
    assert message.endswith(")")


def test_refused_requests_are_skipped_and_reported_with_skip_bad_lines(
    write_lines: Callable[..., Path],
) -> None:
    path = write_lines(
        GOOD,
        '{"id":"q-empty","timestamp":0.5,"prompt":"","max_tokens":16}'.replace(',"timestamp":0.5', ""),
        '{"id": "c", "messages": [{"role": "user", "content": ""}], "max_tokens": 4}',
        GOOD.replace("q1", "q4"),
    )

    w = load_workload(path, skip_bad_lines=True)

    assert [r.id for r in w.requests] == ["q1", "q4"]
    assert [s.split(": ")[0] for s in w.skipped] == [f"{path}:2", f"{path}:3"]


def test_a_conversation_with_some_text_is_kept(write_lines: Callable[..., Path]) -> None:
    path = write_lines(
        '{"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}], "max_tokens": 4}'
    )

    assert load_workload(path).requests[0].messages is not None


def test_a_line_that_is_not_utf8_is_named_by_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((GOOD + "\n" + '{"prompt": "caf\xe9", "max_tokens": 3}\n').encode("latin-1"))

    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value).startswith(f"{path}:2: line: not UTF-8 text at column 16 (byte e9)")
    assert str(info.value).endswith(")")

    w = load_workload(path, skip_bad_lines=True)
    assert [r.id for r in w.requests] == ["q1"] and w.skipped[0].startswith(f"{path}:2: ")
