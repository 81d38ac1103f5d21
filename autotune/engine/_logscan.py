"""Read what vLLM prints: KV capacity, readiness, and why a start failed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["FailureClass", "KvCapacity", "classify_failure", "failure_evidence", "parse_kv_capacity"]

# vLLM >= 0.3x prints one line; 0.26 prints the size and the concurrency on two lines.
_KV_RE = re.compile(r"(?P<dev>GPU|CPU|XPU|NPU|TPU)(?: \+ host)? KV cache size: (?P<tokens>[\d,]+) tokens")
_CONC_RE = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.,]+)x")


class FailureClass(str, Enum):
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


def classify_failure(log_text: str, *, exit_code: int | None, timed_out: bool = False) -> FailureClass:
    """Classify an engine that exited (or never became healthy) from its log and exit code."""
    if timed_out:
        return FailureClass.STARTUP_TIMEOUT
    for cls, pattern in _PATTERNS:
        if pattern.search(log_text):
            return cls
    if exit_code == 2:
        return FailureClass.BAD_FLAG
    if exit_code in (-9, 137):  # SIGKILL: usually the kernel's OOM killer
        return FailureClass.OUT_OF_MEMORY
    return FailureClass.CRASH


_LOG_PREFIX = re.compile(r"^\((?:[\w ]+) pid=\d+\) (?:ERROR|WARNING|INFO) [\d-]+ [\d:]+ \[[^\]]+\] ")


def failure_evidence(log_text: str) -> str | None:
    """The first log line that explains a failure (the root cause, not the traceback's last frame)."""
    for line in log_text.splitlines():
        for _, pattern in _PATTERNS:
            if pattern.search(line):
                return _LOG_PREFIX.sub("", line).strip()[:300]
    return None
