from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import WorkloadError
from autotune.workload import (
    LengthSpec,
    ModelTokenizer,
    TextGenerator,
    load_workload,
    synth_chat,
    synth_prefix_repeat,
    synth_rag,
    write_jsonl,
)


def test_length_spec_parses_fixed_and_ranges() -> None:
    assert LengthSpec.parse("24") == LengthSpec(24, 24)
    assert LengthSpec.parse(" 16 - 32 ") == LengthSpec(16, 32)
    assert LengthSpec.parse("16-32").mean == 24
    assert str(LengthSpec(16, 32)) == "16-32"
    for bad in ("abc", "32-16", "0", "-5", "1.5"):
        with pytest.raises(WorkloadError, match="length"):
            LengthSpec.parse(bad)


def test_word_lengths_are_exact_without_tokenizer() -> None:
    gen = TextGenerator(seed=0)
    for n in (1, 7, 100):
        assert len(gen.text(n).split()) == n
    assert gen.text(0) == ""


def test_text_is_varied() -> None:
    words = TextGenerator(seed=0).text(500).split()
    assert len(set(words)) > 400


@pytest.mark.parametrize("n", [1, 3, 17, 64, 250, 600])
def test_token_lengths_with_a_real_tokenizer(tiny_tokenizer: ModelTokenizer, n: int) -> None:
    gen = TextGenerator(seed=n, tokenizer=tiny_tokenizer)
    for _ in range(5):
        assert abs(len(tiny_tokenizer.encode(gen.text(n))) - n) <= 2


def test_rag_shape_and_shared_documents() -> None:
    records = synth_rag(
        documents=3, document_tokens=50, questions_per_document=4, question_tokens=5, rate=2.0
    )

    assert len(records) == 12
    docs = {r["prompt"].split("\n\nQuestion: ")[0] for r in records}
    assert len(docs) == 3
    assert all(len(d.split()) == 50 for d in docs)
    first_words = {d.split()[0] for d in docs}
    assert len(first_words) == 3  # documents do not share a prefix by accident
    assert len({r["prompt"] for r in records}) == 12
    assert all(16 <= r["max_tokens"] <= 32 for r in records)
    times = [r["timestamp"] for r in records]
    assert times[0] == 0.0 and times == sorted(times)
    assert len({r["id"] for r in records}) == 12


def test_rag_rate_sets_the_mean_arrival_rate() -> None:
    records = synth_rag(documents=10, document_tokens=5, questions_per_document=40, rate=4.0)

    times = [r["timestamp"] for r in records]
    assert 3.4 < (len(times) - 1) / times[-1] < 4.6


def test_rag_without_rate_has_no_timestamps_and_fixed_outputs() -> None:
    records = synth_rag(
        documents=1, document_tokens=5, questions_per_document=3, rate=None, output_tokens=LengthSpec(7, 7)
    )

    assert all("timestamp" not in r for r in records)
    assert {r["max_tokens"] for r in records} == {7}


def test_same_seed_same_records_other_seed_other_text() -> None:
    kwargs = {"documents": 2, "document_tokens": 30, "questions_per_document": 3}
    assert synth_rag(seed=5, **kwargs) == synth_rag(seed=5, **kwargs)
    assert synth_rag(seed=5, **kwargs) != synth_rag(seed=6, **kwargs)
    assert synth_chat(seed=1, sessions=3, turns=2) == synth_chat(seed=1, sessions=3, turns=2)
    assert synth_prefix_repeat(seed=2) == synth_prefix_repeat(seed=2)


def test_determinism_with_a_real_tokenizer(tiny_tokenizer: ModelTokenizer) -> None:
    first = synth_chat(sessions=2, turns=3, system_tokens=40, document_tokens=60, tokenizer=tiny_tokenizer)
    again = synth_chat(sessions=2, turns=3, system_tokens=40, document_tokens=60, tokenizer=tiny_tokenizer)

    assert first == again


def test_chat_turns_carry_the_full_history() -> None:
    records = synth_chat(
        sessions=3, turns=3, system_tokens=10, document_tokens=20, user_tokens=4, think_time=1.5
    )

    by_session: dict[str, list[dict[str, object]]] = {}
    for r in records:
        by_session.setdefault(str(r["session_id"]), []).append(r)
    assert len(by_session) == 3
    system_messages = set()
    for turns in by_session.values():
        assert [t["id"] for t in turns] == [f"{turns[0]['session_id']}-t{k}" for k in range(3)]
        for k, turn in enumerate(turns):
            messages = turn["messages"]
            assert isinstance(messages, list)
            assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * k + ["user"]
            if k:
                previous = turns[k - 1]
                assert messages[: len(previous["messages"])] == previous["messages"]  # history kept
                placeholder = messages[-2]["content"]
                assert len(placeholder.split()) == previous["max_tokens"]  # reply-sized placeholder
                assert turn["think_time"] == 1.5
                assert turn["timestamp"] == pytest.approx(previous["timestamp"] + 1.5, abs=0.002)
            else:
                assert "think_time" not in turn
        system_messages.add(turns[0]["messages"][0]["content"])
    assert len(system_messages) == 1  # system prompt and product document shared by all sessions
    times = [r["timestamp"] for r in records]
    assert times == sorted(times)


def test_chat_documents_split_sessions() -> None:
    records = synth_chat(sessions=4, turns=1, documents=2, system_tokens=5, document_tokens=10)

    systems = [r["messages"][0]["content"] for r in sorted(records, key=lambda r: r["session_id"])]
    assert systems[0] == systems[2] != systems[1] == systems[3]


def test_chat_without_rate_interleaves_turns_round_robin() -> None:
    records = synth_chat(sessions=2, turns=2, rate=None, system_tokens=3, document_tokens=3)

    assert [r["id"] for r in records] == ["s0-t0", "s1-t0", "s0-t1", "s1-t1"]


def test_chat_lengths_in_model_tokens(tiny_tokenizer: ModelTokenizer) -> None:
    records = synth_chat(
        sessions=1, turns=2, system_tokens=80, document_tokens=0, user_tokens=20, tokenizer=tiny_tokenizer
    )

    first, second = records
    assert abs(len(tiny_tokenizer.encode(first["messages"][1]["content"])) - 20) <= 2
    reply = second["messages"][2]["content"]
    assert abs(len(tiny_tokenizer.encode(reply)) - first["max_tokens"]) <= 2


def test_prefix_repeat() -> None:
    records = synth_prefix_repeat(
        prefix_tokens=64, suffixes=5, suffix_tokens=8, output_tokens=LengthSpec(9, 9)
    )

    prefixes = {r["prompt"].split("\n")[0] for r in records}
    suffixes = {r["prompt"].split("\n")[1] for r in records}
    assert len(prefixes) == 1 and len(next(iter(prefixes)).split()) == 64
    assert len(suffixes) == 5 and all(len(s.split()) == 8 for s in suffixes)
    assert {r["max_tokens"] for r in records} == {9}
    assert all("timestamp" not in r for r in records)


def test_generated_files_load(tmp_path: Path) -> None:
    for name, records in {
        "rag": synth_rag(documents=2, document_tokens=10, questions_per_document=2),
        "chat": synth_chat(sessions=2, turns=2, system_tokens=5, document_tokens=5),
        "prefix": synth_prefix_repeat(prefix_tokens=10, suffixes=3, rate=1.0),
    }.items():
        path = tmp_path / f"{name}.jsonl"
        write_jsonl(records, path)
        assert len(load_workload(path)) == len(records)


def test_bad_parameters_are_user_errors() -> None:
    with pytest.raises(WorkloadError, match="documents 0"):
        synth_rag(documents=0)
    with pytest.raises(WorkloadError, match="rate"):
        synth_rag(rate=-1.0)
    with pytest.raises(WorkloadError, match="think-time"):
        synth_chat(think_time=-1)


def test_generators_do_not_share_text_for_one_seed() -> None:
    rag = synth_rag(documents=1, questions_per_document=1, document_tokens=20, seed=0)
    chat = synth_chat(sessions=1, turns=1, system_tokens=20, seed=0)
    repeat = synth_prefix_repeat(prefix_tokens=20, suffixes=1, seed=0)

    starts = {
        rag[0]["prompt"].split()[0],
        chat[0]["messages"][0]["content"].split()[0],
        repeat[0]["prompt"].split()[0],
    }
    assert len(starts) == 3
