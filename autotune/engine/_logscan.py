"""Read what vLLM prints: KV capacity, readiness, and why a start failed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "FailureClass",
    "KvCapacity",
    "classify_failure",
    "failure_evidence",
    "failure_excerpt",
    "kernel_fallback_note",
    "parse_kv_capacity",
    "root_cause_line",
]

# vLLM >= 0.3x prints one line; 0.26 prints the size and the concurrency on two lines.
_KV_RE = re.compile(r"(?P<dev>GPU|CPU|XPU|NPU|TPU)(?: \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens")
_CONC_RE = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.,]+)x")


# The CPU build's linear layers run on oneDNN; on a CPU it was not built for (x86 without
# AVX-512: the line was seen on a 2-core AMD EPYC Zen 3, for bfloat16 and float32 models alike
# under --dtype auto, which serves both in bfloat16) vLLM prints this once per engine and runs them
# on plain torch, many times slower. With --dtype float32 the line is absent and oneDNN runs them
# (test_kv_estimate_vs_vllm starts one such engine).
_KERNEL_FALLBACK = re.compile(r"Failed to create oneDNN linear, fallback to torch linear")


def kernel_fallback_note(log_text: str) -> str | None:
    """A trial note when vLLM's CPU build says it runs its linear layers on its slow fallback."""
    if _KERNEL_FALLBACK.search(log_text) is None:
        return None
    return (
        "vLLM's CPU build ran its linear layers on torch, not oneDNN ('Failed to create oneDNN linear'"
        " in its log): this CPU lacks the instructions the build targets (AVX-512), so its figures"
        " are far slower than a supported CPU's (fix: --engine-arg=--dtype=float32 keeps them on"
        " oneDNN, at twice the KV bytes per token)"
    )


class FailureClass(StrEnum):
    """Why a trial's engine did not serve. Values are stored in study records."""

    BAD_FLAG = "bad_flag"
    OUT_OF_MEMORY = "out_of_memory"
    NO_KV_ROOM = "no_kv_room"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH = "crash"


@dataclass(frozen=True)
class KvCapacity:
    device: str
    tokens: int
    max_model_len: int
    max_concurrency: float


def parse_kv_capacity(text: str) -> KvCapacity | None:
    """The last ``GPU|CPU KV cache size: N tokens`` line and the concurrency line that follows it
    (on the same line in recent vLLM, on the next one in 0.26)."""
    matches = list(_KV_RE.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    conc = _CONC_RE.search(text, m.end())
    return KvCapacity(
        device=m["dev"],
        tokens=int(m["tokens"].replace(",", "")),
        max_model_len=int(conc["len"].replace(",", "")) if conc else 0,
        max_concurrency=float(conc["conc"].replace(",", "")) if conc else 0.0,
    )


# Ordered: the first pattern that matches the log decides.
_PATTERNS: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (
        FailureClass.BAD_FLAG,
        re.compile(
            r"error: unrecognized arguments|error: argument |: error: |"
            r"(?:ValueError|TypeError|pydantic[\w.]*ValidationError).*(?:must be|not supported|"
            r"Invalid|invalid|should be|is not a multiple|No common block size|only supported)|"
            r"No common block size|validation error for|is currently only supported on|"
            r"is not supported on this platform",
        ),
    ),
    (
        FailureClass.NO_KV_ROOM,
        re.compile(
            r"No available memory for the cache blocks|"
            r"To serve at least one request with the model's max seq len|"
            r"less than requested memory for kv|is larger than the maximum number of tokens that can be "
            r"stored in KV cache|Insufficient memory for KV cache|estimated maximum model length is",
        ),
    ),
    (
        FailureClass.OUT_OF_MEMORY,
        re.compile(
            r"OutOfMemoryError|CUDA out of memory|out of memory|Failed to load model - not enough "
            r"GPU memory|is less than desired (?:GPU|CPU) memory utilization|Cannot allocate memory|"
            r"MemoryError|Killed|Insufficient space in /dev/shm",
        ),
    ),
)


def classify_failure(
    log_text: str, *, exit_code: int | None, timed_out: bool = False, oom_killed: bool | None = None
) -> FailureClass:
    """Classify an engine that exited (or never became healthy) from its log and exit code.
    ``oom_killed``: whether the kernel's OOM-kill count rose while it ran (None: unknown here)."""
    if timed_out:
        return FailureClass.STARTUP_TIMEOUT
    for cls, pattern in _PATTERNS:
        if pattern.search(log_text):
            return cls
    if exit_code == 2:
        return FailureClass.BAD_FLAG
    if exit_code in (-9, 137):  # SIGKILL: the kernel's OOM killer, unless its count says otherwise
        return FailureClass.CRASH if oom_killed is False else FailureClass.OUT_OF_MEMORY
    if oom_killed:  # a child (the engine core) was OOM-killed; the server exited after it
        return FailureClass.OUT_OF_MEMORY
    return FailureClass.CRASH


# What is printed around vLLM's own words, removed before a line is judged: torch.distributed's
# "[rank0]: ", the process prefix "(EngineCore_DP0 pid=912) " / "(VllmWorker-0 pid=5255) " that
# vLLM >= 0.11 puts on each child's output, and a logger record "ERROR 11-29 11:00:50 [core.py:1099] "
# (vllm/logger.py's format; NewLineFormatter repeats it on every line of a multi-line message,
# so each line of a logged traceback carries it).
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
_PROC_PREFIX = re.compile(r"^\([^()]*? pid=\d+\) ")
_RECORD_PREFIX = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d [\d:.,]+ \[[^\]]*\] |:\s+)"
)  # vLLM's logger, or uvicorn's ("ERROR:    [Errno 98] error while attempting to bind ...")

# Never a root cause: shutdown chatter and the frame of a traceback rather than its verdict.
# nanobind prints its leak report ("nanobind: leaked 64 types!", " - leaked type ...") when a
# process that imported triton exits, after the real error; Python warnings and torch's C++
# warnings ("[W1130 12:00:42.914 utils.cpp:68] Warning: ...") appear in every healthy start.
_NOISE = re.compile(
    r"^(?:nanobind: |See https://nanobind|Exception ignored|Traceback \(most recent call last\)|"
    r"During handling of the above exception|The above exception was the direct cause|"
    r"\$ |\[[WIE]\d{4} [\d:.]+ |\S+:\d+: \w*Warning: |Process [\w-]+:$)|"
    r"leaked (?:instance|type|function)s?\b|- \.\.\. skipped remainder"
)
# The last line of a traceback ("ValueError: ...", "torch.OutOfMemoryError: ...",
# "vllm.v1.engine.exceptions.EngineDeadError: ...", "huggingface_hub.errors.HFValidationError: ...",
# a bare "Exception: ..."), and argparse's one-line verdict ("api_server.py: error: ...").
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt)(?::\s|:?$)")
_ARGPARSE_ERROR = re.compile(r"^[^\s:][^:]*: error: ")
# Lines that point elsewhere for the cause (vllm/v1/engine/utils.py wait_for_engine_startup,
# vllm/v1/engine/exceptions.py EngineDeadError, multiproc_executor.py wait_for_ready): evidence
# only when nothing better was printed, as when the engine core was SIGKILLed and said nothing.
_POINTER = re.compile(
    r"See root cause above|See stack trace \(above\) for the root cause|See stack trace for root cause"
)


def _message(line: str) -> tuple[str, str | None]:
    """A log line without its prefixes, and its logger level when it is a vLLM log record."""
    text = _RANK_PREFIX.sub("", _PROC_PREFIX.sub("", _RANK_PREFIX.sub("", line.rstrip())))
    record = _RECORD_PREFIX.match(text)
    if record is None:
        return text, None
    return text[record.end() :], record["level"]


def _is_noise(text: str) -> bool:
    return not text.strip() or bool(_NOISE.search(text.strip()))


def root_cause_line(log_text: str) -> str | None:
    """The first line of vLLM's log that says why it failed, without its prefixes; ``None`` if none does.

    In order of preference: the first exception verdict, argparse error or known failure text
    (see ``_PATTERNS``) that is not a pointer such as "Engine core initialization failed. See root
    cause above."; else the first pointer (``EngineDeadError: EngineCore encountered an issue...``);
    else the first ERROR record. Informational records, warnings, traceback frames, what Python
    reports as "Exception ignored in: ..." (a ``__del__`` at exit) and the nanobind leak report
    printed at exit are never chosen.
    """
    pointer: str | None = None
    error_record: str | None = None
    ignored = False  # inside an "Exception ignored in: ..." report: its verdict is not a cause
    for line in log_text.splitlines():
        text, level = _message(line)
        if text.startswith("Exception ignored"):
            ignored = True
        if level in ("DEBUG", "INFO", "WARNING") or _is_noise(text) or text[:1].isspace():
            continue
        text = text.strip()
        verdict = _EXCEPTION_LINE.match(text) or _ARGPARSE_ERROR.match(text)
        if ignored:
            ignored = not verdict
            continue
        known = any(pattern.search(text) for _, pattern in _PATTERNS)
        if (verdict or known) and not _POINTER.search(text):
            return text
        if verdict and pointer is None:
            pointer = text
        elif level in ("ERROR", "CRITICAL") and error_record is None:
            error_record = text
    return pointer or error_record


def failure_evidence(log_text: str) -> str | None:
    """:func:`root_cause_line`, cut to a length that fits in a one-line failure reason."""
    line = root_cause_line(log_text)
    return line[:300] if line is not None else None


def failure_excerpt(log_text: str, *, lines: int = 25) -> str:
    """What a failed trial keeps of its log: the root-cause line first, then the last ``lines``
    lines without the nanobind leak report and blank lines (which otherwise fill the tail)."""
    kept = [ln for ln in log_text.splitlines() if ln.strip() and not _is_shutdown_noise(ln)][-lines:]
    cause = root_cause_line(log_text)
    return "\n".join([f"root cause: {cause}", *kept] if cause else kept)


def _is_shutdown_noise(line: str) -> bool:
    text = _message(line)[0].strip()
    return text.startswith(("nanobind: ", "See https://nanobind", "- leaked ", "- ... skipped remainder"))
