"""``autotune workload ...``: synthesize, import, inspect and validate workload files.

Commands raise :class:`~autotune.errors.WorkloadError`; ``autotune.cli.main`` turns it into a
one-line message and exit code 2.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from autotune.workload import (
    ImportResult,
    LengthSpec,
    LengthStats,
    ModelTokenizer,
    WorkloadReport,
    import_bench_jsonl,
    import_openai_log,
    import_sharegpt,
    inspect_workload,
    load_tokenizer,
    load_workload,
    synth_chat,
    synth_prefix_repeat,
    synth_rag,
    write_jsonl,
)

__all__ = ["app"]

app = typer.Typer(help="Workload files: synthesize, import, inspect, validate.", no_args_is_help=True)
synth_app = typer.Typer(
    help=(
        "Write a synthetic workload. Lengths are tokens of --model's tokenizer (within 2 tokens), "
        "or words of generated text without --model (1 token taken as 1 word)."
    ),
    no_args_is_help=True,
)
app.add_typer(synth_app, name="synth")

Out = Annotated[Path, typer.Option("--out", "-o", help="Workload JSONL file to write.", dir_okay=False)]
Model = Annotated[
    Path | None,
    typer.Option(
        "--model", help="Local model directory: lengths in its tokens (else words).", file_okay=False
    ),
]
Seed = Annotated[int, typer.Option(help="Random seed (same seed, same file).")]
OutputTokens = Annotated[
    str, typer.Option(help="Output tokens per request: N (fixed) or LOW-HIGH (uniform).")
]
SkipBad = Annotated[bool, typer.Option("--skip-bad-lines", help="Skip invalid lines (each one reported).")]


def _tokenizer(model: Path | None) -> ModelTokenizer | None:
    return load_tokenizer(model) if model is not None else None


def _rate(rate: float) -> float | None:
    return rate if rate > 0 else None


def _write(records: list[dict[str, Any]], out: Path, model: Path | None) -> None:
    write_jsonl(records, out)
    workload = load_workload(out)  # what we write must load
    unit = f"tokens of {model}" if model is not None else "words (approximate tokens)"
    typer.echo(f"wrote {len(workload)} requests to {out} (lengths in {unit})")


@synth_app.command("rag")
def synth_rag_cmd(
    out: Out,
    documents: Annotated[int, typer.Option(help="Documents shared by the questions.")] = 4,
    document_tokens: Annotated[int, typer.Option(help="Length of each document.")] = 600,
    questions_per_document: Annotated[int, typer.Option(help="Questions asked about each document.")] = 12,
    question_tokens: Annotated[int, typer.Option(help="Length of each question.")] = 24,
    output_tokens: OutputTokens = "16-32",
    rate: Annotated[float, typer.Option(help="Mean requests/s (Poisson arrivals); 0: no timestamps.")] = 3.0,
    shuffle: Annotated[bool, typer.Option(help="Interleave the documents' questions randomly.")] = True,
    seed: Seed = 0,
    model: Model = None,
) -> None:
    """Questions about shared documents (completions API): each document is a prefix many prompts share."""
    records = synth_rag(
        documents=documents,
        document_tokens=document_tokens,
        questions_per_document=questions_per_document,
        question_tokens=question_tokens,
        output_tokens=LengthSpec.parse(output_tokens),
        rate=_rate(rate),
        shuffle=shuffle,
        seed=seed,
        tokenizer=_tokenizer(model),
    )
    _write(records, out, model)


@synth_app.command("chat")
def synth_chat_cmd(
    out: Out,
    sessions: Annotated[int, typer.Option(help="Conversations.")] = 8,
    turns: Annotated[int, typer.Option(help="User turns per conversation.")] = 4,
    system_tokens: Annotated[int, typer.Option(help="Length of the system prompt shared by all.")] = 300,
    document_tokens: Annotated[
        int, typer.Option(help="Length of the product document in the system message.")
    ] = 400,
    documents: Annotated[int, typer.Option(help="Distinct product documents (session s uses s % N).")] = 1,
    user_tokens: Annotated[int, typer.Option(help="Length of each user message.")] = 32,
    output_tokens: OutputTokens = "16-24",
    think_time: Annotated[float, typer.Option(help="Seconds between a reply and the next user turn.")] = 2.0,
    rate: Annotated[float, typer.Option(help="Mean new sessions/s (Poisson); 0: no timestamps.")] = 0.5,
    seed: Seed = 0,
    model: Model = None,
) -> None:
    """Multi-turn support chat (chat API): every turn carries the whole conversation so far."""
    records = synth_chat(
        sessions=sessions,
        turns=turns,
        system_tokens=system_tokens,
        document_tokens=document_tokens,
        documents=documents,
        user_tokens=user_tokens,
        output_tokens=LengthSpec.parse(output_tokens),
        think_time=think_time,
        rate=_rate(rate),
        seed=seed,
        tokenizer=_tokenizer(model),
    )
    _write(records, out, model)


@synth_app.command("prefix-repeat")
def synth_prefix_repeat_cmd(
    out: Out,
    prefix_tokens: Annotated[int, typer.Option(help="Length of the shared prefix.")] = 512,
    suffixes: Annotated[int, typer.Option(help="Requests, each with its own suffix.")] = 16,
    suffix_tokens: Annotated[int, typer.Option(help="Length of each suffix.")] = 32,
    output_tokens: OutputTokens = "32",
    rate: Annotated[float, typer.Option(help="Mean requests/s (Poisson); 0: no timestamps.")] = 0.0,
    seed: Seed = 0,
    model: Model = None,
) -> None:
    """One prefix repeated with distinct suffixes (completions API): the simplest prefix-cache test."""
    records = synth_prefix_repeat(
        prefix_tokens=prefix_tokens,
        suffixes=suffixes,
        suffix_tokens=suffix_tokens,
        output_tokens=LengthSpec.parse(output_tokens),
        rate=_rate(rate),
        seed=seed,
        tokenizer=_tokenizer(model),
    )
    _write(records, out, model)


class ImportFormat(StrEnum):
    sharegpt = "sharegpt"
    bench_jsonl = "bench-jsonl"
    openai_log = "openai-log"


@app.command("import")
def import_cmd(
    fmt: Annotated[
        ImportFormat, typer.Argument(metavar="FORMAT", help="sharegpt, bench-jsonl or openai-log.")
    ],
    source: Annotated[Path, typer.Argument(metavar="IN", help="File to convert.")],
    out: Out,
    skip_bad_lines: SkipBad = False,
    model: Annotated[
        Path | None, typer.Option("--model", help="sharegpt: count reply lengths in this model's tokens.")
    ] = None,
    default_max_tokens: Annotated[
        int | None,
        typer.Option(help="Output length when the input has none (sharegpt: 128; bench-jsonl: required)."),
    ] = None,
    as_chat: Annotated[
        bool, typer.Option(help="bench-jsonl: send prompts as one user message (as vllm bench serve does).")
    ] = False,
) -> None:
    """Convert ShareGPT, `vllm bench serve` custom JSONL or OpenAI request logs into a workload file."""
    result: ImportResult
    if fmt is ImportFormat.sharegpt:
        result = import_sharegpt(
            source,
            tokenizer=_tokenizer(model),
            default_max_tokens=default_max_tokens or 128,
            skip_bad_lines=skip_bad_lines,
        )
    elif fmt is ImportFormat.bench_jsonl:
        result = import_bench_jsonl(
            source, default_max_tokens=default_max_tokens, as_chat=as_chat, skip_bad_lines=skip_bad_lines
        )
    else:
        result = import_openai_log(source, skip_bad_lines=skip_bad_lines)
    write_jsonl(result.records, out)
    load_workload(out)
    typer.echo(f"converted {result.converted} requests from {source} to {out}")
    _print_skipped(result.skipped)
    for note in result.notes:
        typer.echo(f"note: {note}")


def _print_skipped(skipped: tuple[str, ...], limit: int = 10) -> None:
    if not skipped:
        return
    typer.echo(f"skipped {len(skipped)}:")
    for message in skipped[:limit]:
        typer.echo(f"  {message}")
    if len(skipped) > limit:
        typer.echo(f"  ... and {len(skipped) - limit} more")


@app.command("validate")
def validate_cmd(
    file: Annotated[Path, typer.Argument(help="Workload JSONL file.")],
    skip_bad_lines: SkipBad = False,
) -> None:
    """Check a workload file; print the first problem as file:line: field: problem (fix)."""
    workload = load_workload(file, skip_bad_lines=skip_bad_lines)
    chat = sum(r.is_chat for r in workload.requests)
    sessions = len({r.session_id for r in workload.requests if r.session_id is not None})
    timing = "timestamps" if workload.has_timestamps else "no timestamps"
    typer.echo(f"ok: {file}: {len(workload)} requests ({chat} chat, {sessions} sessions, {timing})")
    _print_skipped(workload.skipped)


@app.command("inspect")
def inspect_cmd(
    file: Annotated[
        Path, typer.Argument(help="Workload JSONL file, or a folder of traffic files (as --workload DIR).")
    ],
    model: Annotated[
        Path | None,
        typer.Option("--model", help="Local model directory: exact tokens, chat template, KV size."),
    ] = None,
    block_size: Annotated[
        int | None,
        typer.Option(
            min=1, help="KV block size. Default: the installed vLLM's (128 on the CPU build, 16 on GPUs)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    skip_bad_lines: SkipBad = False,
) -> None:
    """Sizes, arrival rate, sessions and prefix-reuse potential (upper bound of the prefix-cache hit rate)."""
    from autotune.engine import installed_engine
    from autotune.workload import load_traffic

    workload = (
        load_traffic(file, skip_bad_lines=skip_bad_lines)  # every file of the folder, merged
        if file.is_dir()
        else load_workload(file, skip_bad_lines=skip_bad_lines)
    )
    if block_size is None:
        block_size = 128 if installed_engine().cpu_build else 16
    tokenizer = _tokenizer(model)
    kv_bytes = _kv_bytes_per_token(model) if model is not None else None
    report = inspect_workload(
        workload, block_size=block_size, tokenizer=tokenizer, kv_bytes_per_token=kv_bytes
    )
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)


def _kv_bytes_per_token(model: Path) -> int | None:
    """The estimator's KV bytes per token (GQA, MLA, sliding window, dtype); None if unknown."""
    from autotune.errors import ConfigError
    from autotune.memory import ModelShape

    try:
        return ModelShape.from_config(model).kv_bytes_per_token()
    except ConfigError:
        return None


def _print_report(report: WorkloadReport) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    summary = Table(title=f"Workload {report.path}", show_header=False, title_justify="left")
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row("requests", f"{report.requests} ({report.chat_requests} chat)")
    if report.skipped_lines:
        summary.add_row("skipped lines", str(report.skipped_lines))
    if report.duration_s is not None:
        rate = f", {report.mean_rate:.2f} req/s" if report.mean_rate is not None else ""
        summary.add_row("arrivals", f"over {report.duration_s:.1f} s{rate}")
    else:
        summary.add_row("arrivals", "no timestamps (sent as fast as concurrency allows)")
    if report.sessions:
        summary.add_row(
            "sessions", f"{report.sessions}, turns mean {report.turns_mean:.1f}, max {report.turns_max}"
        )
    summary.add_row("tokens counted by", report.tokenizer)
    summary.add_row("largest prompt + output", f"{report.max_sequence_tokens} tokens")
    summary.add_row(
        f"prefix reuse (block {report.block_size})",
        f"{report.prefix_reuse:.1%} of prompt tokens ({report.prefix_hit_tokens} tokens), "
        "upper bound with unlimited cache",
    )
    working = f"{report.distinct_blocks} blocks = {report.working_set_tokens} tokens"
    if report.working_set_gib is not None:
        working += f" = {report.working_set_gib:.3f} GiB of KV cache"
    summary.add_row("working set", working)
    console.print(summary)

    sizes = Table(title="Tokens per request", title_justify="left")
    for column in ("", "mean", "p50", "p90", "p99", "max", "total"):
        sizes.add_column(column, justify="right" if column else "left")
    for name, stats in (("prompt", report.prompt_tokens), ("output (max_tokens)", report.output_tokens)):
        sizes.add_row(name, *_stats_cells(stats))
    console.print(sizes)
    if not report.tokens_exact:
        console.print("[yellow]Counts are approximate (words); pass --model DIR for exact tokens.[/yellow]")


def _stats_cells(stats: LengthStats) -> list[str]:
    return [
        f"{stats.mean:.1f}",
        f"{stats.p50:.0f}",
        f"{stats.p90:.0f}",
        f"{stats.p99:.0f}",
        str(stats.max),
        str(stats.total),
    ]


@app.command("anonymize")
def anonymize_cmd(
    source: Annotated[
        Path, typer.Argument(metavar="IN", help="Workload JSONL file (any importer's output).")
    ],
    out: Out,
    model: Annotated[
        Path, typer.Option("--model", help="Local model directory: its tokenizer counts and picks the words.")
    ],
    salt_env: Annotated[
        str, typer.Option("--salt-env", help="Environment variable holding the secret salt (never argv).")
    ] = "AUTOTUNE_ANON_SALT",
    skip_bad_lines: SkipBad = False,
) -> None:
    """Replace every prompt and message, keeping token counts, common prefixes, sessions and timing."""
    import os

    from autotune.errors import WorkloadError
    from autotune.workload import anonymize_workload

    salt = os.environ.get(salt_env, "")
    if not salt:
        raise WorkloadError(
            f"anonymize: environment variable {salt_env} is not set or empty "
            f"(export {salt_env} to a secret string; the same salt keeps days comparable)"
        )
    workload = load_workload(source, skip_bad_lines=skip_bad_lines)
    result = anonymize_workload(workload, load_tokenizer(model), salt.encode())
    write_jsonl(result.records, out)
    load_workload(out)
    typer.echo(
        f"anonymized {result.requests} requests from {source} to {out} "
        f"({result.prompt_tokens_in} prompt tokens in, {result.prompt_tokens_out} out)"
    )
    _print_skipped(workload.skipped)
    if result.mismatched:
        typer.echo(f"warning: {len(result.mismatched)} requests changed token count:")
        for line in result.mismatched[:10]:
            typer.echo(f"  {line}")
