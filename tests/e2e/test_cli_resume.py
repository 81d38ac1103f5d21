"""kill -9 during the baseline, then the same command again (issue 30 item 1): the resumed run fails
the killed trial at once (its process is gone), measures one baseline first, and runs exactly the
trials asked for; no trial is left RUNNING and no second baseline is measured."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import optuna
import pytest

from tests.conftest import wait_no_processes
from tests.e2e.test_cli import _autotune, _fake_run, _good_workload, _run, _signal_when_engine_runs

_State = optuna.trial.TrialState


def _trials(db: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{db}").get_trials()


@pytest.mark.parametrize("n_trials", [1, 3])
def test_kill_9_during_the_baseline_then_resume_measures_one_baseline(
    tmp_path: Path, mark: str, n_trials: int
) -> None:
    slow = tmp_path / "slow.jsonl"
    with slow.open("w") as f:
        for i in range(30):
            f.write(json.dumps({"prompt": f"q{i}", "max_tokens": 100, "timestamp": i * 0.3}) + "\n")
    proc = _autotune(_fake_run(tmp_path, slow, "--n-trials", "3", "--study", "s"), mark, tmp_path)
    _signal_when_engine_runs(proc, mark, "fake_vllm.py", settle_s=3.0, sig=signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not wait_no_processes(mark, timeout=30)
    db = tmp_path / "studies" / "s.db"
    before = _trials(db)
    assert [t.state for t in before if t.user_attrs.get("baseline")] == [_State.RUNNING]  # killed in it

    fast = _good_workload(tmp_path / "fast.jsonl")
    res = _run(_fake_run(tmp_path, fast, "--n-trials", str(n_trials), "--study", "s"), mark, tmp_path)
    assert res.returncode == 0, res.stderr
    after = _trials(db)
    assert [t.number for t in after if t.state is _State.RUNNING] == []
    baselines = [t for t in after if t.user_attrs.get("baseline") and t.state is _State.COMPLETE]
    assert len(baselines) == 1 and baselines[0].user_attrs.get("duplicate_of") is None, baselines
    assert not [t for t in after if t.user_attrs.get("baseline") and t.state is _State.WAITING]
    killed = {t.number for t in before if t.state is _State.RUNNING}
    assert all(t.state is _State.FAIL for t in after if t.number in killed)
    ran = [t for t in after if t.number not in killed and t.state.is_finished()]
    assert len(ran) == n_trials, [(t.number, t.state, t.user_attrs.get("duplicate_of")) for t in after]
    assert "baseline: vLLM defaults" in res.stderr
