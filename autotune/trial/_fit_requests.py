"""Every request must fit the model before anything starts: its prompt tokens plus ``max_tokens``
within ``--max-model-len`` (or the model's own maximum). vLLM answers HTTP 400 to one that does
not, and a single such request makes every trial fail its constraints, which would point the user
at the search space instead of the workload line."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from autotune.engine import fixed_max_model_len
from autotune.errors import WorkloadError
from autotune.space import FlagPairs
from autotune.workload import ModelTokenizer, PromptTokenizer, Workload, count_tokens, load_tokenizer

__all__ = ["check_request_sizes", "model_max_len"]

log = logging.getLogger(__name__)
ABSURD_MAX_TOKENS = 1_000_000


def model_max_len(model: str, fixed: FlagPairs) -> int | None:
    """The fixed flags' maximum model length, else the model's ``max_position_embeddings``."""
    try:
        written = fixed_max_model_len(fixed)
    except ValueError:
        return None  # vLLM's own parser reports it
    if written is not None:
        return written
    from autotune.errors import ConfigError
    from autotune.memory import ModelShape

    try:
        return ModelShape.from_config(model).max_position_embeddings or None
    except ConfigError:
        return None


def _tokenizer(model: str) -> PromptTokenizer | None:
    if not (Path(model) / "tokenizer_config.json").exists() and not (Path(model) / "tokenizer.json").exists():
        return None
    try:
        return load_tokenizer(model)
    except WorkloadError:
        return None


def check_request_sizes(wl: Workload, model: str, fixed: FlagPairs, *, skip_bad_lines: bool) -> Workload:
    """The workload without requests that cannot fit (each reported), or a located error."""
    limit = model_max_len(model, fixed)
    tok = _tokenizer(model)
    kept, skipped = [], list(wl.skipped)
    for req in wl.requests:
        problem = None
        if req.max_tokens > ABSURD_MAX_TOKENS:
            problem = f"max_tokens {req.max_tokens:,} is absurd (more than {ABSURD_MAX_TOKENS:,})"
        elif limit is not None:
            prompt = (
                len(tok.prompt_ids(req)) if isinstance(tok, ModelTokenizer) else count_tokens(req.text(), tok)
            )
            if prompt + req.max_tokens > limit:
                unit = "tokens" if tok is not None else "words (no tokenizer in the model directory)"
                problem = f"prompt {prompt:,} {unit} + max_tokens {req.max_tokens:,} exceed the max model length {limit:,}"
        if problem is None:
            kept.append(req)
            continue
        where = f"{wl.path}:{req.line}: request {req.id}: {problem}"
        if not skip_bad_lines:
            raise WorkloadError(
                f"{where} (fix: shorten it, raise --engine-arg=--max-model-len, or pass --skip-bad-lines)"
            )
        skipped.append(where)
    if len(kept) == len(wl.requests):
        return wl
    if not kept:
        raise WorkloadError(f"{wl.path}: no request fits the model (first: {skipped[len(wl.skipped)]})")
    kept = [dataclasses.replace(r, index=i) for i, r in enumerate(kept)]
    return dataclasses.replace(wl, requests=tuple(kept), skipped=tuple(skipped))
