"""Workloads: the user's traffic as a JSONL file of requests, loaded, synthesized, imported, inspected.

File format and semantics: :mod:`autotune.workload._model`. Errors are :class:`WorkloadError`
with one line each, naming the file, line and field.
"""

from __future__ import annotations

from autotune.workload._anonymize import Anonymizer, anonymize_workload, request_record
from autotune.workload._arrivals import arrival_offsets
from autotune.workload._folder import (
    TrafficStats,
    describe_change,
    load_traffic,
    traffic_file_start,
    traffic_stats,
)
from autotune.workload._importers import ImportResult, import_bench_jsonl, import_openai_log, import_sharegpt
from autotune.workload._inspect import LengthStats, WorkloadReport, inspect_workload, prefix_reuse
from autotune.workload._loader import load_workload, sample_workload, write_jsonl
from autotune.workload._model import ChatMessage, Workload, WorkloadRequest
from autotune.workload._synth import LengthSpec, TextGenerator, synth_chat, synth_prefix_repeat, synth_rag
from autotune.workload._tokens import (
    ModelTokenizer,
    PromptTokenizer,
    WordTokenizer,
    count_tokens,
    load_tokenizer,
)

__all__ = [
    "Anonymizer",
    "ChatMessage",
    "ImportResult",
    "LengthSpec",
    "LengthStats",
    "ModelTokenizer",
    "PromptTokenizer",
    "TextGenerator",
    "TrafficStats",
    "WordTokenizer",
    "Workload",
    "WorkloadReport",
    "WorkloadRequest",
    "anonymize_workload",
    "arrival_offsets",
    "count_tokens",
    "describe_change",
    "import_bench_jsonl",
    "import_openai_log",
    "import_sharegpt",
    "inspect_workload",
    "load_tokenizer",
    "load_traffic",
    "load_workload",
    "prefix_reuse",
    "request_record",
    "sample_workload",
    "synth_chat",
    "synth_prefix_repeat",
    "synth_rag",
    "traffic_file_start",
    "traffic_stats",
    "write_jsonl",
]
