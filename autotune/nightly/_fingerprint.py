"""What a night ran on, so that a change in its figures can be explained: the environment (engine,
GPUs, model, tool, space, fixed flags) and the workload (size, lengths, reuse, arrivals)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.errors import WorkloadError
from autotune.memory import read_machine_facts
from autotune.space import measured_bytes
from autotune.tuning import TuningSetup
from autotune.workload import PromptTokenizer, inspect_workload, load_tokenizer

__all__ = ["describe_changes", "fingerprints", "workload_changes"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _model_hash(model: str) -> str | None:
    path = Path(model) / "config.json"
    try:
        return _sha(path.read_bytes())
    except OSError:
        return None


def environment_fingerprint(setup: TuningSetup) -> dict[str, Any]:
    inst = setup.engine.install.installed()
    facts = read_machine_facts()
    space_text = measured_bytes(setup.space_path)
    return {
        "engine": inst.describe(),
        "gpus": [g.name for g in facts.gpus],
        "gpu_memory_gib": [round(g.total / 2**30, 1) for g in facts.gpus],
        "host_memory_gib": round(facts.host_total / 2**30, 1),
        "model": model_id(setup.choices.model),
        "model_config": _model_hash(setup.choices.model) if setup.choices.model else None,
        "tool": __version__,
        "space": _sha(space_text),
        "fixed_flags": " ".join(setup.fixed_argv),
    }


def model_id(model: str | None) -> str | None:
    """A local model folder by its absolute path (``.models/m`` from one folder is
    ``/srv/.models/m`` from another: the same model), a hub name as written."""
    if model and Path(model).is_dir():
        return str(Path(model).resolve())
    return model


def model_tokenizer(model: str | None) -> PromptTokenizer | None:
    """The model's tokenizer when the model is a local directory with one (as the study counts
    tokens); None: approximate words."""
    if not model or not Path(model).is_dir():
        return None
    try:
        return load_tokenizer(str(model_id(model)))
    except WorkloadError:
        return None


def workload_fingerprint(setup: TuningSetup) -> dict[str, Any]:
    block = 128 if setup.platform == "cpu" else 16
    tok = model_tokenizer(setup.choices.model)
    rep = inspect_workload(setup.workload, block_size=block, tokenizer=tok)
    return {
        "tokens_by": tok.name if tok is not None else "words",
        "requests": rep.requests,
        "sessions": rep.sessions,
        "prompt_p50": rep.prompt_tokens.p50,
        "prompt_p90": rep.prompt_tokens.p90,
        "output_p50": rep.output_tokens.p50,
        "prefix_reuse": round(rep.prefix_reuse, 3),
        "working_set_tokens": rep.working_set_tokens,
        "arrival_rate": round(rep.mean_rate, 3) if rep.mean_rate else None,
        "arrivals": setup.arrival.describe(),
        "file_sha": _sha(Path(setup.workload.path).read_bytes()),
    }


def fingerprints(setup: TuningSetup) -> dict[str, dict[str, Any]]:
    return {"environment": environment_fingerprint(setup), "workload": workload_fingerprint(setup)}


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(a - b) <= 0.05 * max(abs(a), abs(b), 1e-9)  # lengths and rates: within 5%
    return bool(a == b)


def describe_changes(
    previous: Mapping[str, Mapping[str, Any]] | None, current: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """``environment.engine: vllm 0.26.0 -> vllm 0.32.0``, one line per fingerprint that moved."""
    if not previous:
        return []
    out = []
    for group, values in current.items():
        before = previous.get(group) or {}
        for key, value in values.items():
            if key in before and not _close(before[key], value):
                out.append(f"{group}.{key}: {json.dumps(before[key])} -> {json.dumps(value)}")
    return out


_WORDS = (
    ("requests", "requests", "{:,.0f}"),
    ("prompt_p50", "prompt tokens (p50)", "{:,.0f}"),
    ("prompt_p90", "prompt tokens (p90)", "{:,.0f}"),
    ("prefix_reuse", "prefix reuse", "{:.0%}"),
    ("working_set_tokens", "working set (tokens)", "{:,.0f}"),
)


def workload_changes(
    previous: Mapping[str, Mapping[str, Any]] | None, current: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """What a new day's traffic changed, in words: ``working set (tokens) 5,760 -> 17,280 (x3.0)``;
    empty when the workload's fingerprint is the same (its file, sizes and reuse)."""
    before, now = (previous or {}).get("workload") or {}, current.get("workload") or {}
    if not before or before.get("file_sha") == now.get("file_sha"):
        return []
    out = []
    for key, label, fmt in _WORDS:
        a, b = before.get(key), now.get(key)
        if isinstance(a, int | float) and isinstance(b, int | float) and a != b:
            big = a and key != "prefix_reuse" and not 0.9 <= b / a <= 1.1
            ratio = f" (x{b / a:.1f})" if big else ""
            out.append(f"{label} {fmt.format(a)} -> {fmt.format(b)}{ratio}")
    return out or ["the workload file changed; its sizes and reuse did not"]
