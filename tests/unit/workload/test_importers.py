from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.workload import (
    ModelTokenizer,
    import_bench_jsonl,
    import_openai_log,
    import_sharegpt,
    load_workload,
    write_jsonl,
)


def _loads(records: tuple[dict[str, object], ...], tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_jsonl(records, path)
    assert len(load_workload(path)) == len(records)


# ---- ShareGPT


def test_sharegpt_conversations_become_sessions(data_dir: Path, tmp_path: Path) -> None:
    result = import_sharegpt(data_dir / "sharegpt_small.json")

    records = result.records
    assert [r["id"] for r in records] == ["QWJhY2t1-t0", "QWJhY2t1-t1", "bWFpbDIw-t0", "bWFpbDIw-t1"]
    assert [r["session_id"] for r in records] == ["QWJhY2t1", "QWJhY2t1", "bWFpbDIw", "bWFpbDIw"]
    second = records[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"].startswith("Use a carbide-tipped")  # recorded reply kept in history
    # max_tokens = words of the recorded reply (no tokenizer), 128 when the turn was never answered
    assert records[1]["max_tokens"] == 12  # "Yes , keep the tile wet so the bit stays cool ."
    assert records[2]["max_tokens"] == 2  # "Bonjour." = word + period
    assert records[3]["max_tokens"] == 128
    assert len(result.skipped) == 1 and "Z3B0b25seQ" not in result.skipped[0]
    assert result.skipped[0].endswith("entry 2: no human turn in the conversation")
    _loads(records, tmp_path)


def test_sharegpt_reply_length_in_model_tokens(data_dir: Path, tiny_tokenizer: ModelTokenizer) -> None:
    result = import_sharegpt(
        data_dir / "sharegpt_small.json", tokenizer=tiny_tokenizer, default_max_tokens=50
    )

    assert result.records[2]["max_tokens"] == len(tiny_tokenizer.encode("Bonjour."))
    assert result.records[3]["max_tokens"] == 50


def test_sharegpt_malformed_entries_fail_or_are_skipped(data_dir: Path, tmp_path: Path) -> None:
    path = data_dir / "sharegpt_malformed.json"
    with pytest.raises(
        WorkloadError, match=r"sharegpt_malformed.json:entry 1: expected an object .*--skip-bad-lines"
    ):
        import_sharegpt(path)

    result = import_sharegpt(path, skip_bad_lines=True)

    assert [r["session_id"] for r in result.records] == ["ok1", "ok2"]
    reasons = [s.split(": ", 1)[1] for s in result.skipped]
    assert reasons[0].startswith('expected an object with a "conversations" list')
    assert "unknown speaker 'robot'" in reasons[1]
    assert "conversations[0]" in reasons[2]
    assert len(result.skipped) == 4
    _loads(result.records, tmp_path)


def test_sharegpt_truncated_file_is_one_error(data_dir: Path) -> None:
    with pytest.raises(WorkloadError, match=r"sharegpt_truncated.json:\d+: invalid JSON"):
        import_sharegpt(data_dir / "sharegpt_truncated.json", skip_bad_lines=True)


def test_sharegpt_jsonl_and_repeated_ids(tmp_path: Path) -> None:
    conv = '{"id": "dup", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}'
    path = tmp_path / "sg.jsonl"
    path.write_text(conv + "\n" + conv + "\n")

    result = import_sharegpt(path)

    assert len({r["session_id"] for r in result.records}) == 2
    _loads(result.records, tmp_path)


# ---- vllm bench serve custom JSONL


def test_bench_jsonl(data_dir: Path, tmp_path: Path) -> None:
    result = import_bench_jsonl(data_dir / "bench_custom.jsonl")

    assert [(r["prompt"][:9], r["max_tokens"]) for r in result.records] == [
        ("What is t", 10),
        ("Summarize", 64),
        ("Write a h", 24),
    ]
    assert [r["id"] for r in result.records] == ["line-1", "line-2", "line-4"]
    assert result.skipped == ()
    _loads(result.records, tmp_path)


def test_bench_jsonl_as_chat(data_dir: Path) -> None:
    result = import_bench_jsonl(data_dir / "bench_custom.jsonl", as_chat=True)

    assert result.records[0]["messages"] == [{"role": "user", "content": "What is the capital of India?"}]
    assert "prompt" not in result.records[0]


def test_bench_jsonl_malformed(data_dir: Path) -> None:
    path = data_dir / "bench_custom_malformed.jsonl"
    with pytest.raises(WorkloadError, match=r"bench_custom_malformed.jsonl:2: output_tokens: missing"):
        import_bench_jsonl(path)

    result = import_bench_jsonl(path, skip_bad_lines=True)

    assert [r["max_tokens"] for r in result.records] == [12, 8]
    assert [s.split(":")[1] for s in result.skipped] == ["2", "3", "4", "5", "6"]
    assert "got 'lots'" in result.skipped[1] and "invalid JSON" in result.skipped[3]


def test_bench_jsonl_default_output_length(data_dir: Path) -> None:
    result = import_bench_jsonl(
        data_dir / "bench_custom_malformed.jsonl", default_max_tokens=100, skip_bad_lines=True
    )

    assert [r["max_tokens"] for r in result.records] == [12, 100, 8]


# ---- OpenAI request logs


def test_openai_log(data_dir: Path, tmp_path: Path) -> None:
    result = import_openai_log(data_dir / "openai_requests.jsonl")

    records = result.records
    assert [r["id"] for r in records] == ["line-1", "line-2", "line-3", "line-5"]
    assert [r["timestamp"] for r in records] == [0.0, 0.75, 2.5, 4.25]
    assert records[0]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert records[1]["messages"][0]["role"] == "system"  # developer -> system
    assert records[1]["messages"][1]["content"] == "List two colors as an array."
    assert records[1]["max_tokens"] == 48  # max_completion_tokens
    assert records[2] == {"id": "line-3", "prompt": "Once upon a time", "max_tokens": 16, "timestamp": 2.5}
    assert [m["role"] for m in records[3]["messages"]] == ["user", "assistant", "tool"]
    assert all(set(r) <= {"id", "messages", "prompt", "max_tokens", "timestamp"} for r in records)
    assert len(result.skipped) == 1
    assert result.skipped[0].endswith(
        ":4: no max_tokens or max_completion_tokens: the output length is unknown"
    )
    _loads(records, tmp_path)


def test_openai_batch_and_top_level_created(data_dir: Path, tmp_path: Path) -> None:
    result = import_openai_log(data_dir / "openai_batch.jsonl")

    assert [r["id"] for r in result.records] == ["req-1", "req-2", "line-3"]
    assert result.records[1]["prompt"] == "A single prompt in a list"
    assert all("timestamp" not in r for r in result.records)
    assert result.notes and "only 1 of 3" in result.notes[0]
    _loads(result.records, tmp_path)


def test_openai_malformed(data_dir: Path, tmp_path: Path) -> None:
    path = data_dir / "openai_malformed.jsonl"
    with pytest.raises(WorkloadError, match=r"openai_malformed.jsonl:3: neither messages nor prompt"):
        import_openai_log(path)

    result = import_openai_log(path, skip_bad_lines=True)

    assert [r["messages"][0]["content"] for r in result.records] == ["Fine request", "Also fine"]
    assert [r["timestamp"] for r in result.records] == [0.0, 5.0]
    skipped = {s.split(":")[1]: s for s in result.skipped}
    assert set(skipped) == {"2", "3", "4", "5", "6"}
    assert "'image_url' part" in skipped["2"]
    assert "token ids" in skipped["5"]
    assert "got -1" in skipped["6"]
    _loads(result.records, tmp_path)


def test_nothing_to_import_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "x"}]}\n')

    with pytest.raises(
        WorkloadError, match=r"nothing to import \(1 entries skipped; first skip: .*no max_tokens"
    ):
        import_openai_log(path)


def test_missing_input_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="file not found"):
        import_bench_jsonl(tmp_path / "absent.jsonl")
