"""Many-trial study loop against the fake server: baseline first, failures as data, resume, export."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import optuna
import yaml

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.export import export_best, measured_launcher, runnable_launcher
from autotune.space import load_search_space
from autotune.study import (
    Objective,
    TrialHooks,
    TrialPolicy,
    TrialStatus,
    best_feasible,
    constraints_hold,
    ensure_baseline,
    load_or_create,
    read_record,
    run_study,
)
from autotune.trial import VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, write_fake_space


def _workload(path: Path, n: int = 12) -> Path:
    doc = " ".join(f"w{i % 50}" for i in range(300))
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"{doc} q{i}", "max_tokens": 4, "timestamp": i * 0.01}) + "\n")
    return path


def test_study_runs_baseline_first_records_failures_resumes_and_exports(tmp_path: Path, mark: str) -> None:
    space = load_search_space(write_fake_space(tmp_path))
    wl = load_workload(_workload(tmp_path / "wl.jsonl"))
    spec = LaunchSpec(
        model="fake-model",
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_OOM_BLOCK_SIZE": "32"},
        fixed_args=(("--max-model-len", "1024"),),
        startup_timeout_s=20,
        stop_timeout_s=2,
    )
    evaluator = VllmEvaluator(
        spec=spec, workload=wl, arrival=ArrivalSpec(mode="timestamps"), log_dir=tmp_path
    )
    obj = Objective(metric="ttft_p90", min_throughput_ratio=0.5)
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = load_or_create(url, "fake-study", obj, seed=1)
    seen: list[int] = []
    # One trial is pinned to block size 32 (the fake runs out of memory there), so the failure
    # path is checked every time, not only when the sampler happens to pick it.
    ensure_baseline(study)
    study.enqueue_trial({"block_size": 32, "max_num_batched_tokens": 1024, "enable_prefix_caching": True})
    run_study(
        study,
        TrialPolicy(space=space, objective=obj),
        evaluator,
        8,
        TrialHooks(on_done=lambda rep: seen.append(rep.number)),
    )
    trials = study.get_trials()
    assert seen == list(range(8))
    assert trials[0].user_attrs["baseline"] is True and trials[0].params == {}
    assert trials[0].user_attrs["rendered_args"] == []
    assert trials[0].user_attrs["status"] == "ok"
    oom = 0
    for t in trials:
        rec = read_record(t)
        assert list(rec.command[0:2]) == list(FAKE_LAUNCHER)
        assert rec.log_path and Path(rec.log_path).exists()
        if t.params.get("block_size") == 32:  # the fake runs out of memory with block size 32
            assert rec.status is TrialStatus.FAILED and rec.failure == "out_of_memory"
            assert not constraints_hold(rec.constraints)
            oom += rec.duplicate_of is None
        else:
            assert rec.ok, rec.reason
            assert rec.figures is not None and rec.figures.completed == 12
            assert rec.kv_tokens and rec.kv_tokens > 0
    assert oom >= 1
    best = best_feasible(study)
    assert best is not None and best.params.get("block_size") != 32

    # Resume: same name and storage; the baseline is not repeated.
    again = load_or_create(url, "fake-study", obj, seed=2)
    run_study(again, TrialPolicy(space=space, objective=obj), evaluator, 2)
    all_trials = optuna.load_study(study_name="fake-study", storage=url).get_trials()
    assert len(all_trials) == 10
    assert sum(bool(t.user_attrs.get("baseline")) for t in all_trials) == 1

    target = tmp_path / "best.yaml"
    best, exported = export_best(again, out=target)
    data = yaml.safe_load(target.read_text())
    # exactly the measured command: the fixed flag too, though export was given no flags
    assert data["model"] == "fake-model" and data["max-model-len"] == 1024
    rec = read_record(best)
    for flag in rec.rendered_args:
        if flag.startswith("--no-"):
            assert data[flag[2:]] is True
    # the launcher the trial used, or the API server's module where the `vllm` script cannot run here
    launcher = " ".join(shlex.quote(a) for a in runnable_launcher(measured_launcher(rec.command)))
    assert exported.command.startswith(launcher) and "fake-model" in exported.command
