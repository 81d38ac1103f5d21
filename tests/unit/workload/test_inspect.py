from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.workload import (
    ChatMessage,
    LengthStats,
    ModelTokenizer,
    WordTokenizer,
    WorkloadRequest,
    inspect_workload,
    load_workload,
    prefix_reuse,
    write_jsonl,
)


def _workload(tmp_path: Path, records: list[dict[str, object]]) -> Path:
    path = tmp_path / "w.jsonl"
    write_jsonl(records, path)
    return path


def _prompts(*texts: str) -> list[dict[str, object]]:
    return [{"prompt": t, "max_tokens": 1} for t in texts]


def test_two_prompts_sharing_exactly_two_full_blocks(tmp_path: Path) -> None:
    # block size 4: A = [a b c d][e f g h] i j ; B = [a b c d][e f g h][x y z w] q
    w = load_workload(_workload(tmp_path, _prompts("a b c d e f g h i j", "a b c d e f g h x y z w q")))

    report = inspect_workload(w, block_size=4)

    assert report.prompt_tokens.total == 23
    assert report.prefix_hit_tokens == 8
    assert report.prefix_reuse == pytest.approx(8 / 23)
    assert report.distinct_blocks == 3  # abcd, abcd+efgh, abcd+efgh+xyzw
    assert report.working_set_tokens == 12


def test_same_block_at_another_position_does_not_hit() -> None:
    tok = WordTokenizer()
    a = tok.encode("x y z w a b c d q")
    b = tok.encode("a b c d x y z w q")

    reuse = prefix_reuse([a, b], block_size=4)

    assert reuse.hit_tokens == 0
    assert reuse.distinct_blocks == 4


def test_partial_blocks_and_the_last_token_never_hit() -> None:
    tok = WordTokenizer()
    short = tok.encode("a b c")  # no full block
    exact = tok.encode("a b c d e f g h")  # 8 tokens: the last block holds the last token

    assert prefix_reuse([short, short], block_size=4).hit_tokens == 0
    assert prefix_reuse([exact, exact], block_size=4).hit_tokens == 4
    assert prefix_reuse([exact, exact + tok.encode("i")], block_size=4).hit_tokens == 8


def test_hits_need_an_earlier_request_and_count_every_repeat() -> None:
    ids = list(range(9))

    reuse = prefix_reuse([ids, ids, ids], block_size=4)

    assert reuse.hit_tokens == 16  # 2 full blocks on each of the two repeats
    assert reuse.prompt_tokens == 27
    assert reuse.share == pytest.approx(16 / 27)


def test_prefix_reuse_rejects_bad_block_size() -> None:
    with pytest.raises(ValueError, match="block_size"):
        prefix_reuse([[1, 2]], block_size=0)


def test_sizes_rate_and_sessions(data_dir: Path, tmp_path: Path) -> None:
    records = [
        {"prompt": "w " * 10, "max_tokens": n, "timestamp": float(t)}
        for n, t in zip((10, 20, 30, 40), (0, 1, 2, 4), strict=True)
    ]
    report = inspect_workload(load_workload(_workload(tmp_path, records)), block_size=16)

    assert report.requests == 4 and report.chat_requests == 0
    assert report.duration_s == 4.0
    assert report.mean_rate == pytest.approx(0.75)
    assert (
        report.output_tokens.p50 == 25.0
        and report.output_tokens.max == 40
        and report.output_tokens.total == 100
    )
    assert report.prompt_tokens.max == 10
    assert report.max_sequence_tokens == 50
    assert report.sessions == 0 and report.turns_max == 0
    assert not report.tokens_exact and "approximate" in report.tokenizer

    chat = inspect_workload(load_workload(data_dir / "chat_sessions.jsonl"))
    assert chat.sessions == 2 and chat.turns_mean == 1.5 and chat.turns_max == 2
    assert chat.chat_requests == 3


def test_percentiles() -> None:
    stats = LengthStats.of(list(range(1, 101)))

    assert (stats.p50, stats.p90, stats.p99, stats.max) == (
        pytest.approx(50.5),
        pytest.approx(90.1),
        pytest.approx(99.01),
        100,
    )


def test_no_timestamps_no_rate(tmp_path: Path) -> None:
    report = inspect_workload(load_workload(_workload(tmp_path, _prompts("a", "b"))))

    assert report.duration_s is None and report.mean_rate is None


def test_working_set_in_gib(tmp_path: Path) -> None:
    w = load_workload(_workload(tmp_path, _prompts("a b c d e f g h i")))

    report = inspect_workload(w, block_size=4, kv_bytes_per_token=2**20)

    assert report.working_set_tokens == 8
    assert report.working_set_gib == pytest.approx(8 / 1024)


def test_chat_prompts_use_the_chat_template(tiny_tokenizer_dir: Path, data_dir: Path) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    tok = ModelTokenizer(hf, name="model tiny")
    w = load_workload(data_dir / "chat_sessions.jsonl")
    alice_1, _, alice_2, completion = w.requests
    assert alice_1.messages is not None

    ids = tok.prompt_ids(alice_1)

    rendered = hf.apply_chat_template(
        [m.as_dict() for m in alice_1.messages], tokenize=False, add_generation_prompt=True
    )
    assert rendered.startswith("<s><|system|>") and rendered.endswith("<|assistant|>\n")
    assert ids == hf.encode(rendered, add_special_tokens=False)
    assert tok.prompt_ids(alice_2)[: len(ids)] == ids  # the next turn extends this one
    assert tok.prompt_ids(completion) == hf.encode(completion.text(), add_special_tokens=True)

    report = inspect_workload(w, block_size=4, tokenizer=tok)

    # only alice's second turn reuses anything: every full block of her first turn
    assert report.prefix_hit_tokens == len(ids) // 4 * 4
    assert report.tokens_exact and report.tokenizer == "model tiny"


def test_chat_without_template_joins_roles(tiny_tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    hf.chat_template = None
    messages = (ChatMessage("system", "be brief"), ChatMessage("user", "hello"))
    request = WorkloadRequest(index=0, line=1, id="x", max_tokens=1, messages=messages)

    assert ModelTokenizer(hf).prompt_ids(request) == hf.encode(
        "system: be brief\nuser: hello", add_special_tokens=True
    )


def test_report_serializes_to_json(tmp_path: Path) -> None:
    report = inspect_workload(load_workload(_workload(tmp_path, _prompts("a b"))))

    data = json.loads(json.dumps(report.as_dict()))

    assert data["requests"] == 1 and data["prompt_tokens"]["max"] == 2 and data["working_set_gib"] is None
