"""The study table as `autotune run` prints it."""

from __future__ import annotations

import optuna
from rich.console import Console

from autotune.usecases import study_table


def _text(study: optuna.Study) -> str:
    console = Console(width=250, record=True)
    console.print(study_table(study, "ttft_p90"))
    return console.export_text()


def test_a_queued_candidate_shows_its_values_not_the_defaults() -> None:
    """The prior's candidate waits in the queue with its values in fixed_params; before this, the
    table called it "vLLM defaults" (seen on the H200 when a one-trial run stopped after the baseline)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.enqueue_trial({"max_num_batched_tokens": 8192, "cpu_swap_space_gb": 16})
    text = _text(study)
    assert "max_num_batched_tokens=8192" in text and "cpu_swap_space_gb=16" in text
    assert "vLLM defaults" not in text
