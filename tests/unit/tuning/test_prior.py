"""The prior's LRU prediction on block chains, and its reasoning on a real setup (tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autotune.tuning import TuningChoices, build_setup
from autotune.tuning._prior import _chains, lru_hit_share

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_lru_predicts_hits_until_the_cache_is_smaller_than_what_is_reused() -> None:
    doc_a, doc_b = list(range(64)), list(range(100, 164))
    # a, b, a, b: with room for both documents the second visits hit; with room for one, nothing does
    prompts = [[*doc_a, 1000 + i] for i in range(2)] + [[*doc_b, 2000 + i] for i in range(2)]
    order = [prompts[0], prompts[2], prompts[1], prompts[3]]
    ch = _chains(order, 16)
    assert ch.distinct == 8 and ch.prompt_tokens == 4 * 65
    assert lru_hit_share(ch, 10_000) == pytest.approx(2 * 64 / 260)
    assert lru_hit_share(ch, 128) == pytest.approx(2 * 64 / 260)  # both documents fit exactly
    assert lru_hit_share(ch, 64) == 0.0  # one document's room: each evicts the other


def test_the_shared_head_of_a_prompt_outlives_its_tail() -> None:
    head = list(range(32))
    prompts = [head + list(range(1000 + 100 * i, 1000 + 100 * i + 32)) + [9] for i in range(3)]
    ch = _chains(prompts, 16)
    # room for 3 blocks: each request leaves head (2 blocks) most recent, so the next one hits them
    assert lru_hit_share(ch, 48) == pytest.approx(2 * 2 * 16 / (3 * 65))


def _workload(path: Path, docs: int, words: int, repeats: int) -> Path:
    with path.open("w") as f:
        for r in range(repeats):
            for d in range(docs):
                doc = " ".join(f"d{d}w{i}" for i in range(words))
                f.write(json.dumps({"prompt": f"{doc} question {r}", "max_tokens": 2}) + "\n")
    return path


def test_the_prior_enqueues_the_best_predicted_memory_setting_and_explains_it(
    tmp_path: Path, tiny_model: Path
) -> None:
    wl = _workload(tmp_path / "w.jsonl", docs=6, words=200, repeats=3)
    choices = TuningChoices(workload=wl, model=str(tiny_model), engine_args=("--max-model-len=2048",))
    with build_setup(choices) as setup:
        prior = setup.apply_prior()
        assert prior is not None
        text = "\n".join(prior.lines)
        assert "working set" in text and "predicted prefix hits" in text
        best = prior.candidates[0]
        assert best["kv_cache_memory_bytes"] == max(
            setup.space.parameters["kv_cache_memory_bytes"].choices or ()
        )
        small = prior.predict({**best, "kv_cache_memory_bytes": 8})
        large = prior.predict(best)
        assert large["prefix_hit_gpu"] > small["prefix_hit_gpu"]  # a pool smaller than the working set evicts
        assert large["prefix_hit_gpu"] == pytest.approx(large["prefix_hit_bound"])
        study = optuna.create_study()
        assert prior.enqueue(study) == prior.candidates
        assert prior.enqueue(study) == []  # already queued: not twice
