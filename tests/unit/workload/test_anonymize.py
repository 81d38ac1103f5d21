"""Anonymized workloads keep what tuning measures (token counts, common prefixes, sessions, timing)
and keep no text of the original."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli.workload import app
from autotune.errors import WorkloadError
from autotune.workload import (
    ModelTokenizer,
    Workload,
    anonymize_workload,
    import_openai_log,
    import_sharegpt,
    inspect_workload,
    load_tokenizer,
    load_workload,
    synth_chat,
    synth_rag,
    write_jsonl,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _load(records: list[dict[str, object]], path: Path) -> Workload:
    write_jsonl(records, path)
    return load_workload(path)


def _workloads(tmp_path: Path, tok: ModelTokenizer, data_dir: Path) -> dict[str, Workload]:
    chat = synth_chat(sessions=6, turns=4, documents=3, system_tokens=60, document_tokens=150, tokenizer=tok)
    rag = synth_rag(documents=3, document_tokens=300, questions_per_document=5, tokenizer=tok)
    sharegpt = import_sharegpt(data_dir / "sharegpt_small.json", tokenizer=tok).records
    openai = import_openai_log(data_dir / "openai_requests.jsonl").records
    return {
        "chat": _load(chat, tmp_path / "chat.jsonl"),
        "rag": _load(rag, tmp_path / "rag.jsonl"),
        "sharegpt": _load(sharegpt, tmp_path / "sharegpt.jsonl"),
        "openai": _load(openai, tmp_path / "openai.jsonl"),
        "sessions": load_workload(data_dir / "chat_sessions.jsonl"),
        "support": load_workload(EXAMPLES / "support_chat.jsonl"),
        "examples-rag": load_workload(EXAMPLES / "rag.jsonl"),
    }


def _figures(w: Workload, tok: ModelTokenizer, block_size: int) -> tuple[int, int, int, list[int]]:
    r = inspect_workload(w, block_size=block_size, tokenizer=tok)
    return (
        r.prompt_tokens.total,
        r.prefix_hit_tokens,
        r.distinct_blocks,
        [len(tok.prompt_ids(q)) for q in w.requests],
    )


def _five_grams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}


def _all_text(w: Workload) -> str:
    return "\n".join(
        r.prompt if r.prompt is not None else "\n".join(m.content for m in r.messages or ())
        for r in w.requests
    )


@pytest.mark.parametrize("tokenizer_kind", ["unit", "tiny-model"])
def test_inspect_figures_are_unchanged_and_no_text_survives(
    tmp_path: Path, tiny_tokenizer: ModelTokenizer, tiny_model: Path, data_dir: Path, tokenizer_kind: str
) -> None:
    # Two tokenizers with different chat templates ("<|user|>\n{content}" and "user: {content}").
    tok = tiny_tokenizer if tokenizer_kind == "unit" else load_tokenizer(tiny_model)
    for name, w in _workloads(tmp_path, tok, data_dir).items():
        result = anonymize_workload(w, tok, b"secret")
        anon = _load(result.records, tmp_path / f"{name}.anon.jsonl")

        assert result.mismatched == (), name
        for block_size in (16, 128):
            assert _figures(anon, tok, block_size) == _figures(w, tok, block_size), (name, block_size)
        assert not _five_grams(_all_text(w)) & _five_grams(_all_text(anon)), name
        # sessions, turn order, roles, timestamps and output lengths are kept
        assert [len(s) for s in anon.sessions().values()] == [len(s) for s in w.sessions().values()], name
        for a, b in zip(w.requests, anon.requests, strict=True):
            assert (a.timestamp, a.max_tokens, a.think_time, a.is_chat) == (
                b.timestamp,
                b.max_tokens,
                b.think_time,
                b.is_chat,
            )
            assert [m.role for m in a.messages or ()] == [m.role for m in b.messages or ()]
            assert (a.session_id is None) == (b.session_id is None)
            assert a.session_id is None or a.session_id not in str(b.session_id)


def test_shared_reuse_is_real_in_the_test_workloads(
    tmp_path: Path, tiny_tokenizer: ModelTokenizer, data_dir: Path
) -> None:
    """The equality above means something: the workloads do reuse prefixes at both block sizes."""
    w = _workloads(tmp_path, tiny_tokenizer, data_dir)
    assert inspect_workload(w["chat"], block_size=128, tokenizer=tiny_tokenizer).prefix_reuse > 0.3
    assert inspect_workload(w["rag"], block_size=16, tokenizer=tiny_tokenizer).prefix_reuse > 0.5


def test_same_salt_keeps_two_days_sharing_their_documents(
    tmp_path: Path, tiny_tokenizer: ModelTokenizer
) -> None:
    doc = "the cache holds the prefix of every question about the token " * 20
    day1 = _load([{"prompt": doc + "first question", "max_tokens": 4}], tmp_path / "d1.jsonl")
    day2 = _load([{"prompt": doc + "another one here", "max_tokens": 4}], tmp_path / "d2.jsonl")

    a1 = anonymize_workload(day1, tiny_tokenizer, b"salt").records[0]["prompt"]
    a2 = anonymize_workload(day2, tiny_tokenizer, b"salt").records[0]["prompt"]
    other = anonymize_workload(day1, tiny_tokenizer, b"other salt").records[0]["prompt"]

    shared = len(tiny_tokenizer.encode(doc)) - 2  # the last word may merge with what follows
    assert a1.split()[:shared] == a2.split()[:shared]
    assert a1 == anonymize_workload(day1, tiny_tokenizer, b"salt").records[0]["prompt"]  # deterministic
    assert a1.split()[:shared] != other.split()[:shared]


def test_cli_reads_the_salt_from_the_named_variable_only(
    tmp_path: Path, tiny_tokenizer_dir: Path, data_dir: Path
) -> None:
    out = tmp_path / "anon.jsonl"
    args = [
        "anonymize",
        str(data_dir / "chat_sessions.jsonl"),
        "-o",
        str(out),
        "--model",
        str(tiny_tokenizer_dir),
    ]

    missing = CliRunner().invoke(app, [*args, "--salt-env", "MY_SALT"], env={"MY_SALT": ""})
    ok = CliRunner().invoke(app, [*args, "--salt-env", "MY_SALT"], env={"MY_SALT": "s3cret"})

    assert isinstance(missing.exception, WorkloadError) and "MY_SALT" in str(missing.exception)
    assert ok.exit_code == 0, ok.output
    assert "anonymized 4 requests" in ok.stdout and "s3cret" not in out.read_text()
    assert len(load_workload(out)) == 4
