"""Imports never write a request that vLLM would refuse and the loader would then reject (issue 30,
item 2), and a non-UTF-8 input is named by its line (item 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.workload import import_bench_jsonl, import_openai_log, import_sharegpt


def test_bench_jsonl_refuses_an_empty_prompt_on_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text('{"prompt": "hello", "output_tokens": 4}\n{"prompt": "", "output_tokens": 4}\n')

    with pytest.raises(WorkloadError, match=rf"^{path}:2: prompt: no text, got '' \(vLLM refuses it"):
        import_bench_jsonl(path)
    assert len(import_bench_jsonl(path, skip_bad_lines=True).records) == 1


def test_an_openai_log_skips_requests_without_text(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    bodies = [
        {"prompt": "hello", "max_tokens": 4},
        {"prompt": "", "max_tokens": 4},
        {"messages": [{"role": "user", "content": ""}], "max_tokens": 4},
    ]
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))

    result = import_openai_log(path)

    assert [r.get("prompt") for r in result.records] == ["hello"]
    assert [s.split(": ")[0] for s in result.skipped] == [f"{path}:2", f"{path}:3"]


def test_sharegpt_leaves_out_a_turn_without_text(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    conv = [{"from": "human", "value": ""}, {"from": "gpt", "value": "ok"}, {"from": "human", "value": "hi"}]
    path.write_text(json.dumps([{"id": "c", "conversations": conv}]))

    records = import_sharegpt(path, default_max_tokens=8).records

    assert [r["id"] for r in records] == ["c-t0"] and records[0]["messages"][-1]["content"] == "hi"


def test_a_non_utf8_input_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_bytes(b'{"prompt": "hello", "output_tokens": 4}\n{"prompt": "caf\xe9", "output_tokens": 4}\n')

    with pytest.raises(WorkloadError, match=rf"^{path}:2: not UTF-8 text at column 16 \(byte e9\)"):
        import_bench_jsonl(path)
