"""How long each part of vLLM's start took, read from vLLM's own log lines.

Two kinds of figure, and each phase says which it is:

- printed: vLLM times the phase itself and logs the seconds (weights, compile, graphs, init
  engine). Kept as printed (centiseconds; "Graph capturing finished in %.0f secs" whole seconds).
- spans: the gap between the timestamps of two log records (imports, total, and compile on the
  CPU build, which prints no compile figure). vLLM's logger stamps records to the second
  (``_DATE_FORMAT = "%m-%d %H:%M:%S"`` in vllm/logger.py, 0.26 and 0.32), so a span is good to
  about a second.

What the log cannot show is left out: the API server's own imports before its first record (the
caller's launch-to-healthy time, :attr:`EngineProcess.startup_s`, includes them), and anything
after the last timestamped record (uvicorn's "Application startup complete." has no timestamp).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta

__all__ = ["STARTUP_PHASES", "startup_phases"]

# Every key startup_phases may return, in the order the phases run ("init_engine" holds
# "kv_profile", "compile" and "graphs"; "total" spans them all).
STARTUP_PHASES: tuple[str, ...] = (
    "imports",
    "weights",
    "compile",
    "graphs",
    "kv_profile",
    "init_engine",
    "total",
)

# A vLLM log record: "(EngineCore pid=752) INFO 11-29 11:39:29 [core.py:347] message"
# (vllm/logger.py _FORMAT; the process tag is part of the format since vLLM 0.11).
_RECORD = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)[.,\d]* \[[^\]]+\] ?(?P<msg>.*)$"
)
_NUM = r"(?P<s>\d+(?:\.\d+)?)"
# Model load starts: vllm/v1/worker/gpu_model_runner.py and cpu_model_runner.py ("Starting to load
# model %s..."), vllm/v1/worker/gpu/model_runner.py, the V2 runner ("Loading model from scratch...").
_LOAD_START = re.compile(r"^(?:Starting to load model |Loading model from scratch)")
# The whole load (GPU runners; 0.26's V2 runner omits "memory"), else its two parts as the loaders
# print them (model_loader/base_loader.py "Initializing model took", default_loader.py and
# sharded_state_loader.py "Loading weights took"; 0.26 has only the latter).
_MODEL_LOADING = re.compile(rf"Model loading took [\d.]+ GiB (?:memory )?and {_NUM} seconds")
_MODEL_INIT = re.compile(rf"Initializing model took {_NUM} seconds")
_WEIGHTS = re.compile(rf"Loading weights took {_NUM} seconds")
# vllm/v1/engine/core.py _initialize_kv_caches: profiling, KV cache allocation, compile and CUDA
# graph capture; the suffix is vLLM's own compile total when torch.compile ran (0.26 and 0.32).
_INIT_ENGINE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s(?: \(compilation: (?P<c>[\d.]+) s)?"
)
# vllm/compilation/monitor.py and decorators.py ("took" since 0.2x, "takes" before).
_COMPILE_TOTAL = re.compile(
    rf"torch\.compile (?:and initial profiling/warmup run together )?(?:took|takes) {_NUM} s in total"
)
# vllm/v1/worker/gpu_model_runner.py and gpu/model_runner.py: "... in %.0f secs, took %.2f GiB".
_GRAPHS = re.compile(rf"Graph capturing finished in {_NUM} secs")
# vllm/v1/worker/cpu_model_runner.py warming_up_model: the CPU build compiles here and prints no
# figure of its own, only these two records (absent with --enforce-eager).
_CPU_COMPILE_START = re.compile(r"^Warming up model for the compilation\.\.\.")
_CPU_COMPILE_END = re.compile(r"^Warming up done\.")
# The API server's last record before uvicorn serves (api_server.py in 0.26, entry.py in 0.32).
_SERVING = re.compile(r"^Starting vLLM server on ")


def _records(log_text: str) -> Iterator[tuple[datetime, str]]:
    """Each timestamped vLLM record: its time and message. Stamps carry no year: they are read
    in 2000 (a leap year, so 02-29 parses), and a stamp a day or more before the previous one
    crossed New Year's Eve and moves a year on."""
    last: datetime | None = None
    for line in log_text.splitlines():
        m = _RECORD.search(line)
        if m is None:
            continue
        at = datetime.strptime("2000-" + m["stamp"], "%Y-%m-%d %H:%M:%S")
        if last is not None and at < last - timedelta(days=1):
            at += timedelta(days=366)
        last = at
        yield at, m["msg"]


def _largest(pattern: re.Pattern[str], messages: list[str], group: str = "s") -> float | None:
    """The largest figure of ``pattern`` (tensor-parallel workers each print theirs and run
    in parallel, so the slowest is the phase's length); ``None`` if no record carries it."""
    found = [float(m[group]) for msg in messages if (m := pattern.search(msg)) and m[group] is not None]
    return max(found) if found else None


def _first_at(pattern: re.Pattern[str], records: list[tuple[datetime, str]]) -> datetime | None:
    return next((at for at, msg in records if pattern.search(msg)), None)


def _span(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return (end - start).total_seconds()


def _weights(messages: list[str]) -> float | None:
    whole = _largest(_MODEL_LOADING, messages)
    if whole is not None:
        return whole
    parts = [x for x in (_largest(_MODEL_INIT, messages), _largest(_WEIGHTS, messages)) if x is not None]
    return sum(parts) if parts else None


def _compile(messages: list[str], records: list[tuple[datetime, str]]) -> float | None:
    """vLLM's own compile total (init engine's suffix, else "torch.compile took X s in total"),
    else, on the CPU build, the span of its compile warm-up."""
    for figure in (_largest(_INIT_ENGINE, messages, "c"), _largest(_COMPILE_TOTAL, messages)):
        if figure is not None:
            return figure
    return _span(_first_at(_CPU_COMPILE_START, records), _first_at(_CPU_COMPILE_END, records))


def startup_phases(log_text: str) -> dict[str, float]:
    """Seconds per start-up phase of one vLLM start, from its log; keys among :data:`STARTUP_PHASES`,
    each present only when the log holds the records it is read from:

    - ``imports``: from vLLM's first record to the start of the model load (the engine core and
      worker processes start, import and initialise the device); a span.
    - ``weights``: building the model and loading its weights ("Model loading took ... Y seconds",
      else "Initializing model took X" plus "Loading weights took Y seconds").
    - ``compile``: torch.compile, including loading compiled graphs from a warm cache.
    - ``graphs``: CUDA graph capture ("Graph capturing finished in X secs").
    - ``init_engine``: "init engine (profile, create kv cache, warmup model) took X s", which
      holds compile and graphs.
    - ``kv_profile``: ``init_engine`` less ``compile`` and ``graphs``: memory profiling, KV cache
      allocation and warm-up. Derived, so it carries their rounding; never below 0.
    - ``total``: from vLLM's first record to "Starting vLLM server on ..."; a span.

    One start per log: the first load, compile and serving records count.
    """
    records = list(_records(log_text))
    messages = [msg for _, msg in records]
    first = records[0][0] if records else None
    phases: dict[str, float | None] = {
        "imports": _span(first, _first_at(_LOAD_START, records)),
        "weights": _weights(messages),
        "compile": _compile(messages, records),
        "graphs": _largest(_GRAPHS, messages),
        "init_engine": _largest(_INIT_ENGINE, messages),
        "total": _span(first, _first_at(_SERVING, records)),
    }
    init = phases["init_engine"]
    if init is not None:
        phases["kv_profile"] = max(0.0, init - (phases["compile"] or 0.0) - (phases["graphs"] or 0.0))
    return {key: round(value, 2) for key in STARTUP_PHASES if (value := phases.get(key)) is not None}
