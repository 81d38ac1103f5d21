from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from autotune.cli.workload import app
from autotune.errors import WorkloadError
from autotune.workload import load_tokenizer, load_workload

runner = CliRunner()


def _error(result: Result) -> str:
    """The WorkloadError a command raised (the top-level CLI prints it as one line, exit code 2)."""
    assert isinstance(result.exception, WorkloadError), result.output
    message = str(result.exception)
    assert "\n" not in message
    return message


def test_synth_rag_writes_a_loadable_file(tmp_path: Path) -> None:
    out = tmp_path / "rag.jsonl"

    result = runner.invoke(
        app, ["synth", "rag", "--out", str(out), "--documents", "2", "--questions-per-document", "3"]
    )

    assert result.exit_code == 0, result.output
    assert f"wrote 6 requests to {out}" in result.stdout and "words" in result.stdout
    w = load_workload(out)
    assert len(w) == 6 and w.has_timestamps


def test_synth_rag_in_model_tokens(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    out = tmp_path / "rag.jsonl"
    args = [
        "synth",
        "rag",
        "-o",
        str(out),
        "--documents",
        "1",
        "--document-tokens",
        "100",
        "--question-tokens",
        "10",
    ]

    result = runner.invoke(
        app, [*args, "--questions-per-document", "2", "--model", str(tiny_tokenizer_dir), "--rate", "0"]
    )

    assert result.exit_code == 0, result.output
    tok = load_tokenizer(tiny_tokenizer_dir)
    w = load_workload(out)
    document = (w.requests[0].prompt or "").split("\n\nQuestion: ")[0]
    assert abs(len(tok.encode(document)) - 100) <= 2
    assert not w.has_timestamps


def test_synth_chat_and_prefix_repeat(tmp_path: Path) -> None:
    chat, prefix = tmp_path / "chat.jsonl", tmp_path / "prefix.jsonl"

    r1 = runner.invoke(
        app, ["synth", "chat", "--out", str(chat), "--sessions", "3", "--turns", "2", "--output-tokens", "5"]
    )
    r2 = runner.invoke(
        app, ["synth", "prefix-repeat", "--out", str(prefix), "--suffixes", "4", "--prefix-tokens", "20"]
    )

    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    chat_w = load_workload(chat)
    assert len(chat_w) == 6 and {r.max_tokens for r in chat_w.requests} == {5}
    assert len(chat_w.sessions()) == 3
    assert len(load_workload(prefix)) == 4


def test_synth_bad_option_is_a_one_line_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["synth", "rag", "--out", str(tmp_path / "x.jsonl"), "--output-tokens", "32-16"]
    )

    assert _error(result).startswith("length 32-16: must be 1 <= low <= high")
    assert not (tmp_path / "x.jsonl").exists()


def test_synth_missing_model_dir(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["synth", "rag", "--out", str(tmp_path / "x.jsonl"), "--model", str(tmp_path / "none")]
    )

    assert "model directory not found" in _error(result)


def test_import_reports_converted_and_skipped(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "imported.jsonl"

    result = runner.invoke(
        app,
        [
            "import",
            "openai-log",
            str(data_dir / "openai_malformed.jsonl"),
            "--out",
            str(out),
            "--skip-bad-lines",
        ],
    )

    assert result.exit_code == 0, result.output
    assert "converted 2 requests" in result.stdout
    assert "skipped 5:" in result.stdout
    assert "openai_malformed.jsonl:4: invalid JSON" in result.stdout
    assert len(load_workload(out)) == 2


def test_import_without_skip_fails_on_a_bad_line(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "imported.jsonl"

    result = runner.invoke(
        app, ["import", "bench-jsonl", str(data_dir / "bench_custom_malformed.jsonl"), "--out", str(out)]
    )

    assert "bench_custom_malformed.jsonl:2: output_tokens: missing" in _error(result)
    assert not out.exists()


def test_import_sharegpt_and_bench_options(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sg.jsonl"
    result = runner.invoke(
        app,
        [
            "import",
            "sharegpt",
            str(data_dir / "sharegpt_small.json"),
            "-o",
            str(out),
            "--default-max-tokens",
            "77",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "skipped 1:" in result.stdout
    assert load_workload(out).requests[-1].max_tokens == 77

    out2 = tmp_path / "bench.jsonl"
    args = ["import", "bench-jsonl", str(data_dir / "bench_custom_malformed.jsonl"), "-o", str(out2)]
    result = runner.invoke(app, [*args, "--default-max-tokens", "9", "--as-chat", "--skip-bad-lines"])
    assert result.exit_code == 0, result.output
    w = load_workload(out2)
    assert [r.max_tokens for r in w.requests] == [12, 9, 8] and all(r.is_chat for r in w.requests)


def test_import_unknown_format(data_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["import", "csv", str(data_dir / "bench_custom.jsonl"), "-o", str(tmp_path / "o.jsonl")]
    )

    assert result.exit_code == 2
    assert "sharegpt" in result.stderr


def test_validate(data_dir: Path, tmp_path: Path) -> None:
    ok = runner.invoke(app, ["validate", str(data_dir / "chat_sessions.jsonl")])
    assert ok.exit_code == 0
    assert "ok:" in ok.stdout and "4 requests (3 chat, 2 sessions, timestamps)" in ok.stdout

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "max_tokens": 1}\n{"prompt": "b", "max_tokens": "x"}\n')
    result = runner.invoke(app, ["validate", str(bad)])
    assert _error(result) == (
        f"{bad}:2: max_tokens: must be an integer >= 1, got 'x' "
        "(set max_tokens to the number of output tokens to generate)"
    )

    skipped = runner.invoke(app, ["validate", str(bad), "--skip-bad-lines"])
    assert skipped.exit_code == 0
    assert "1 requests" in skipped.stdout and "skipped 1:" in skipped.stdout


def test_inspect_table(data_dir: Path) -> None:
    result = runner.invoke(app, ["inspect", str(data_dir / "chat_sessions.jsonl"), "--block-size", "4"])

    assert result.exit_code == 0, result.output
    for text in (
        "requests",
        "4 (3 chat)",
        "prefix reuse (block 4)",
        "working set",
        "Tokens per request",
        "approximate",
    ):
        assert text in result.stdout


def test_inspect_json_with_model(tmp_path: Path, tiny_tokenizer_dir: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_tokenizer_dir, model)
    config = {  # what a real Llama config.json holds (the estimator reads the whole shape)
        "model_type": "llama",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_size": 256,
        "intermediate_size": 512,
        "vocab_size": 600,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (model / "config.json").write_text(json.dumps(config))
    wl = tmp_path / "p.jsonl"
    runner.invoke(
        app,
        [
            "synth",
            "prefix-repeat",
            "-o",
            str(wl),
            "--prefix-tokens",
            "64",
            "--suffixes",
            "4",
            "--model",
            str(model),
        ],
    )

    result = runner.invoke(app, ["inspect", str(wl), "--model", str(model), "--json", "--block-size", "16"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["requests"] == 4 and report["tokens_exact"] is True
    assert report["kv_bytes_per_token"] == 2 * 2 * 64 * 2 * 2  # layers x kv heads x head dim x K,V x bf16
    assert report["working_set_gib"] == report["working_set_tokens"] * 1024 / 2**30
    assert report["prefix_hit_tokens"] >= 3 * 48  # 3 of 4 requests reuse at least 3 blocks of the prefix


def test_inspect_missing_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path / "nope.jsonl")])

    assert "file not found" in _error(result)


def test_mounted_cli_prints_one_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "max_tokens": 1, "temprature": 0}\n')

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with pytest.raises(SystemExit) as info:
            main(["workload", "validate", str(bad)])
    finally:  # main() installs process-wide signal handlers
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}:1: temprature: unknown key")
    assert "\n" not in err


def test_inspect_block_size_defaults_to_the_installed_builds(tmp_path: Path) -> None:
    """The CPU build's KV block is 128 tokens, a GPU build's 16: inspect counts reuse in those blocks."""
    from autotune.engine import installed_engine

    wl = tmp_path / "p.jsonl"
    runner.invoke(app, ["synth", "prefix-repeat", "-o", str(wl), "--prefix-tokens", "300", "--suffixes", "4"])
    result = runner.invoke(app, ["inspect", str(wl), "--json"])
    assert result.exit_code == 0, result.output
    expected = 128 if installed_engine().cpu_build else 16
    assert json.loads(result.stdout)["block_size"] == expected


def test_inspect_a_folder_of_traffic_files_as_workload_dir_reads_it(tmp_path: Path) -> None:
    traffic = tmp_path / "traffic"
    traffic.mkdir()
    for hour in range(2):
        rows = [
            {"prompt": f"hour {hour} q {i}", "max_tokens": 4, "timestamp": 3600.0 * hour + i}
            for i in range(3)
        ]
        (traffic / f"t{hour}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = runner.invoke(app, ["inspect", str(traffic), "--json", "--block-size", "16"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["requests"] == 6  # both files, merged (was: "is a directory")
