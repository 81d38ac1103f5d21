"""What a night says: a new day's traffic in words, and why no candidate challenged the incumbent."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.nightly._decide import Candidate, no_candidate_reason, worse_reason
from autotune.nightly._fingerprint import describe_changes, model_id, workload_changes

BEFORE = {
    "workload": {
        "file_sha": "a",
        "requests": 48,
        "prompt_p50": 637.0,
        "prompt_p90": 638.0,
        "prefix_reuse": 0.737,
        "working_set_tokens": 2048,
    }
}


def test_a_new_days_traffic_is_named_in_words() -> None:
    after = {
        "workload": {**BEFORE["workload"], "file_sha": "b", "prefix_reuse": 0.603, "working_set_tokens": 6144}
    }
    assert workload_changes(BEFORE, after) == [
        "prefix reuse 74% -> 60%",
        "working set (tokens) 2,048 -> 6,144 (x3.0)",
    ]
    assert workload_changes(BEFORE, BEFORE) == []  # the same file: nothing to say
    assert workload_changes(None, after) == []  # the first night


def _cand(number: int, status: str, *, feasible: bool = False, reason: str | None = None) -> Candidate:
    return Candidate(
        number=number,
        params={"block_size": 32},
        status=status,
        value=None if not feasible else 40.0,
        feasible=feasible,
        reused=None,
        baseline=False,
        args=("--block-size", "32"),
        env={},
        reason=reason,
    )


def test_the_reason_names_what_ran_and_why_none_could_challenge() -> None:
    inc = ("--block-size", "128")
    assert no_candidate_reason([], inc, "--max-trials 0 turned the search off") == (
        "no candidate ran: --max-trials 0 turned the search off"
    )
    pruned = _cand(3, "pruned", reason="2.7x trial 1's worst pass, beyond the 35% noise margin")
    text = no_candidate_reason([pruned, _cand(4, "infeasible", reason="does not fit")], inc, "")
    assert text.startswith("no candidate was feasible: 2 ran (1 infeasible, 1 pruned); trial #3 pruned: 2.7x")
    assert "no candidate other than the incumbent" not in text
    best = _cand(5, "ok", feasible=True)
    assert worse_reason(best, 3, "ttft_p90", 35.0) == (
        "every candidate was worse: the best of 3 feasible, trial #5, measured ttft_p90 40.0 ms "
        "against the incumbent's 35.0 ms tonight"
    )


def test_a_model_folder_named_from_another_folder_is_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A night run from another folder named '.models/m' where the last said '/srv/.models/m': the
    fingerprint said 'environment.model changed' (a real night on the CPU build)."""
    (tmp_path / ".models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    before = {"environment": {"model": model_id(str(tmp_path / ".models" / "m"))}}
    after = {"environment": {"model": model_id(".models/m")}}
    assert describe_changes(before, after) == []
    assert model_id("meta-llama/Llama-3.1-8B") == "meta-llama/Llama-3.1-8B"  # a hub name as written
