"""The workload as the model replays it (:class:`WorkloadShape`): prompt token ids as the model's
tokenizer cuts them (words when it has none here: close enough to rank, as the prior does), and each
request's planned arrival: its timestamp divided by the replay's speed, or Poisson arrivals at
``rate``. Later turns of a session are planned at their own timestamps (the replayer sends them after
the previous turn and its think time: under load the model sees them early)."""

from __future__ import annotations

import numpy as np

from autotune.errors import ConfigError, WorkloadError
from autotune.predict._model import WorkloadShape
from autotune.workload import PromptTokenizer, WordTokenizer, Workload, arrival_offsets, load_tokenizer

__all__ = ["workload_shape"]


def _tokenizer(model: str) -> PromptTokenizer:
    try:
        return load_tokenizer(model)
    except WorkloadError:
        return WordTokenizer()


def workload_shape(
    workload: Workload,
    model: str,
    *,
    speed: float = 1.0,
    rate: float | None = None,
    arrivals: np.ndarray | None = None,
) -> WorkloadShape:
    """``arrivals`` (seconds, workload order), when given, are taken as they are: a measured
    replay's planned offsets."""
    if speed <= 0:
        raise ConfigError(f"--speed: {speed:g} is not > 0 (fix: 1 replays the workload at its own pace)")
    reqs = workload.requests
    if arrivals is None:
        if rate is not None:
            if rate <= 0:
                raise ConfigError(f"--rate: {rate:g} is not > 0 (fix: requests per second, e.g. 2)")
            arrivals = arrival_offsets(len(reqs), rate)
        elif workload.has_timestamps:
            ts = np.array([r.timestamp or 0.0 for r in reqs], dtype=float)
            arrivals = (ts - ts.min()) / speed if len(ts) else ts
        else:
            raise ConfigError(
                f"{workload.path}: no timestamps, so no arrivals to predict under (fix: pass --rate N)"
            )
    tok = _tokenizer(model)
    return WorkloadShape(
        ids=tuple(r.id for r in reqs),
        prompts=tuple(tuple(tok.prompt_ids(r)) for r in reqs),
        arrivals=np.asarray(arrivals, dtype=float),
        outputs=np.array([r.max_tokens for r in reqs], dtype=float),
    )
