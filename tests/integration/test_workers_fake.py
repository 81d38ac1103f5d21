"""Parallel workers on one study, with fake GPUs and the fake server: each engine on its own GPU,
leases never shared, a killed worker replaced and its lease reclaimed, nothing left after Ctrl-C.

The pool (``run_parallel``) gets its GPUs from a fake probe; the workers are the real
``autotune worker`` processes. Each engine is started through a wrapper that prints the
environment it was given (``CUDA_VISIBLE_DEVICES``, the lease token) into its trial log.

Run as a script (``python test_workers_fake.py pool ARGS.json``) it is a pool parent, for the tests
that signal or kill the parent.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import optuna
import pytest

from autotune.engine._lease import LEASE_DIR_ENV, lease_holders
from autotune.study import TrialReport, open_storage, read_record, unmeasured
from autotune.studyfile import StudySpec
from autotune.tuning import (
    RUN_ATTR,
    ParallelRun,
    TuningSetup,
    build_setup,
    open_study,
    plan_baseline,
    plan_groups,
    run_parallel,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.conftest import FAKE_VLLM, MARK_ENV, wait_no_processes, write_fake_space  # noqa: E402
from tests.unit.conftest import FakeProbe, h100  # noqa: E402

WRAPPER = """#!/bin/sh
echo "ENGINE_ENV gpus=${{CUDA_VISIBLE_DEVICES:-none}} lease=${{AUTOTUNE_GPU_LEASE:-none}}"
exec {python} {fake} "$@"
"""
ENV_RE = re.compile(r"ENGINE_ENV gpus=(\S+) lease=(\S+)")


def _done(t: optuna.trial.FrozenTrial) -> bool:
    """A trial with an outcome: measured (COMPLETE) or ended without a measurement (PRUNED, no value)."""
    return t.state.name == "COMPLETE" or unmeasured(t)


def _files(tmp_path: Path, n_requests: int = 8) -> dict[str, str]:
    model = tmp_path / "fake-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((REPO / "tests/data/model_configs/tiny-llama-2layer.json").read_text())
    doc = " ".join(f"w{i % 50}" for i in range(200))
    wl = tmp_path / "wl.jsonl"
    with wl.open("w") as f:
        for i in range(n_requests):
            f.write(json.dumps({"prompt": f"{doc} q{i}", "max_tokens": 4, "timestamp": i * 0.02}) + "\n")
    space = write_fake_space(tmp_path)
    wrapper = tmp_path / "engine.sh"
    wrapper.write_text(WRAPPER.format(python=sys.executable, fake=FAKE_VLLM))
    wrapper.chmod(0o755)
    return {
        "workload": str(wl),
        "model": str(model),
        "space": str(space),
        "launcher": str(wrapper),
    }


def _choices(files: dict[str, str], *engine_args: str) -> StudySpec:
    return StudySpec(
        workload=Path(files["workload"]),
        model=files["model"],
        space=Path(files["space"]),
        launcher=files["launcher"],
        engine_args=("--kv-cache-memory-bytes=64M", "--max-model-len=1024", *engine_args),
        startup_timeout=30,
        warmup=1,
        check_args=False,
        objective="ttft_p90",
        min_throughput_ratio=0.5,
        passes="1",  # these tests are about GPUs, leases and storage (passes and pruning: test_passes_fake)
        prune=False,
    )


def _pool(
    setup: TuningSetup, studies_dir: Path, n_gpus: int, n_trials: int, **kw: object
) -> tuple[ParallelRun, optuna.Study, list[str]]:
    opened = open_study(setup, "par", None, studies_dir, 0, plan_baseline(setup))
    groups = plan_groups(
        setup, "all", probe=FakeProbe(gpu_list=[h100(index=i) for i in range(n_gpus)]), env={}
    )
    said: list[str] = []
    run = run_parallel(
        setup,
        opened.study,
        opened.directory,
        groups,
        storage=None,
        studies_dir=studies_dir,
        n_trials=n_trials,
        say=said.append,
        poll_s=0.2,
        **kw,  # type: ignore[arg-type]
    )
    return run, opened.study, said


@pytest.fixture
def env(tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(MARK_ENV, mark)  # workers and their engines inherit it: the fixture finds leftovers
    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "leases"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    yield tmp_path


def _engine_env(trial: optuna.trial.FrozenTrial) -> tuple[str, str]:
    log = read_record(trial).log_path
    assert log, trial.user_attrs
    found = ENV_RE.search(Path(log).read_text())
    assert found, log
    return found[1], found[2]


def _intervals_do_not_overlap(trials: list[optuna.trial.FrozenTrial]) -> None:
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert isinstance(end, datetime) and start >= end


def test_four_workers_on_four_gpus_share_one_study_without_sharing_a_gpu(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_START_DELAY", "4")  # engine starts dear enough to overlap with the baseline's
    files = _files(env)
    snapshots: list[dict[int, int | None]] = []

    def watch(rep: TrialReport) -> None:  # while the workers run: who holds which lease
        held = lease_holders(range(4), env / "leases")
        snapshots.append({g: (h.pid if h else None) for g, h in held.items()})

    with build_setup(_choices(files)) as setup:
        run, study, said = _pool(setup, env / "studies", n_gpus=4, n_trials=9, on_trial_done=watch)
    assert run.returncodes == {0: 0, 1: 0, 2: 0, 3: 0}, said
    trials = [t for t in study.get_trials() if t.user_attrs.get(RUN_ATTR)]
    assert 9 <= len(trials) <= 12 and all(_done(t) for t in trials)
    baselines = [t for t in study.get_trials() if t.user_attrs.get("baseline")]
    assert len(baselines) == 1 and read_record(baselines[0]).ok  # measured once, by worker 0
    assert baselines[0].user_attrs["worker"] == 0
    base_done = baselines[0].datetime_complete
    assert isinstance(base_done, datetime)
    others = [t for t in trials if not t.user_attrs.get("baseline")]
    # the other workers start their engines while the baseline is measured (not after it) ...
    assert any(t.datetime_start is not None and t.datetime_start < base_done for t in others), (
        baselines[0].datetime_start,
        base_done,
        [(t.user_attrs.get("worker"), t.datetime_start) for t in others],
    )
    # ... and every trial held its throughput against the baseline's (exactly 0.0 without a baseline
    # figure), so each replay waited for the baseline's measurement
    for t in others:
        rec = read_record(t)
        assert rec.constraint_names[0] == "throughput_vs_baseline" and rec.constraints[0] != 0.0, rec
    by_gpu: dict[str, list[optuna.trial.FrozenTrial]] = {}
    tokens: dict[str, set[str]] = {}
    for t in trials:
        rec = read_record(t)
        if rec.failure == "prior":
            continue  # vetoed by the prior before any launch (a region it measured once already)
        assert rec.ok, rec.reason
        if rec.duplicate_of is not None:
            continue  # a configuration measured before: its measurement (and log) is the twin's
        gpus, token = _engine_env(t)
        assert gpus == ",".join(map(str, t.user_attrs["gpus"]))  # the engine saw exactly the trial's GPU
        assert t.user_attrs["gpu_name"] == "NVIDIA H100 80GB HBM3"
        assert gpus == str(t.user_attrs["worker"])  # worker k was given GPU k
        by_gpu.setdefault(gpus, []).append(t)
        tokens.setdefault(gpus, set()).add(token)
    assert sorted(by_gpu) == ["0", "1", "2", "3"]
    assert all(len(v) == 1 for v in tokens.values())  # one lease per GPU for the whole run...
    assert len({next(iter(v)) for v in tokens.values()}) == 4  # ...and no two GPUs under one lease
    for on_one_gpu in by_gpu.values():
        _intervals_do_not_overlap(on_one_gpu)
    # while they ran, four live workers held the four leases
    assert any(len({p for p in snap.values() if p}) == 4 for snap in snapshots), snapshots
    assert all(h is None for h in lease_holders(range(4), env / "leases").values())  # all released
    # what the study says about its devices, and that it is one study in one storage
    assert sum(k.startswith("worker:") for k in study.user_attrs) == 4 and "gpu_mix" not in study.user_attrs
    assert len({t.number for t in trials}) == len(trials)


def test_a_tensor_parallel_group_of_two_takes_two_gpus(env: Path) -> None:
    files = _files(env, n_requests=4)
    with build_setup(_choices(files, "--tensor-parallel-size=2")) as setup:
        run, study, _ = _pool(setup, env / "studies", n_gpus=4, n_trials=4)
        assert [g.gpus for g in run.groups] == [(0, 1), (2, 3)]
        launched = [
            t for t in study.get_trials() if t.user_attrs.get(RUN_ATTR) and read_record(t).failure != "prior"
        ]
        seen = {_engine_env(t)[0] for t in launched}  # a trial the prior vetoed launched nothing
        assert seen == {"0,1", "2,3"}
        # the confirmation measures on the first group, leased by the pool's own process
        evaluator = run.evaluator
        assert evaluator.spec.env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert lease_holders([0, 1], env / "leases")[0].pid == os.getpid()  # type: ignore[union-attr]
        run.close()
        assert lease_holders([0, 1], env / "leases")[0] is None


def test_a_killed_worker_is_replaced_and_its_lease_reclaimed(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_START_DELAY", "1.5")  # long enough to kill a worker mid-trial
    files = _files(env, n_requests=4)
    killed: dict[str, int] = {}
    url = f"sqlite:///{env / 'studies' / 'par.db'}"

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            time.sleep(0.2)
            try:
                running = optuna.load_study(study_name="par", storage=open_storage(url)).get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
                )
            except Exception:
                continue
            if any(t.user_attrs.get("worker") == 1 for t in running):
                holder = lease_holders([1], env / "leases")[1]
                if holder is not None:
                    time.sleep(0.5)  # its engine is starting
                    os.kill(holder.pid, signal.SIGKILL)
                    killed["pid"] = holder.pid

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    with build_setup(_choices(files)) as setup:
        run, study, said = _pool(setup, env / "studies", n_gpus=2, n_trials=6)
    thread.join()
    assert killed, said
    assert run.restarts[1] == 1 and run.returncodes[1] == 0, said
    assert any("worker 1" in s and "restarting it" in s for s in said), said
    log = (env / "studies" / "par" / "workers" / "worker-1.log").read_text()
    assert f"reclaimed the lease of pid {killed['pid']}" in log
    trials = [t for t in study.get_trials() if t.user_attrs.get(RUN_ATTR)]
    states = [t.state.name for t in trials if t.user_attrs.get("worker") == 1]
    assert "FAIL" in states  # the trial it died in is failed, not left running
    assert sum(_done(t) for t in trials) >= 5
    on_gpu1 = [t for t in trials if _done(t) and t.user_attrs.get("worker") == 1]
    # the replacement measures on GPU 1, unless worker 0 ran the rest of the trials while it started
    # (the killed trial is failed at once now, not held RUNNING for the heartbeat's grace)
    assert on_gpu1 or "nothing left to run" in log, log
    assert sum(bool(t.user_attrs.get("baseline")) and _done(t) for t in study.get_trials()) == 1


def _parent(env: Path, files: dict[str, str], mark: str, n_gpus: int) -> subprocess.Popen[str]:
    args = env / "pool.json"
    args.write_text(json.dumps({**files, "studies_dir": str(env / "studies"), "n_gpus": n_gpus}))
    return subprocess.Popen(
        [sys.executable, __file__, "pool", str(args)],
        cwd=REPO,
        env={**os.environ, MARK_ENV: mark},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group, as a shell gives a foreground job
        # Ctrl-C as at a terminal, even when this suite runs in the background (which ignores SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _engines_running(env: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list((env / "studies" / "par").glob("trial-*.log"))
        live = [p for p in logs if "Application startup complete" in p.read_text()]
        if len(live) >= count:
            return
        time.sleep(0.2)
    raise AssertionError("the engines did not start")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sigkill"])
def test_stopping_the_pool_leaves_nothing_running(
    env: Path, mark: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reaches the whole foreground group; SIGTERM only the pool; SIGKILL the pool without a
    chance to clean up (its workers then get SIGTERM from the kernel, their engines stop)."""
    monkeypatch.setenv("FAKE_TTFT_S", "0.5")  # slow requests: the engines are busy when the signal comes
    files = _files(env, n_requests=30)
    parent = _parent(env, files, mark, n_gpus=3)
    try:
        _engines_running(env, count=4)  # the baseline's engine, then the three workers'
    except AssertionError:
        parent.kill()
        raise AssertionError(parent.communicate()[0]) from None
    if how == "ctrl-c":
        os.killpg(parent.pid, signal.SIGINT)
    elif how == "sigterm":
        parent.send_signal(signal.SIGTERM)
    else:
        parent.kill()
    out, _ = parent.communicate(timeout=90)
    if how != "sigkill":
        assert parent.returncode == 130, out
    left = wait_no_processes(mark, timeout=30)
    assert not left, [p.cmdline()[:4] for p in left]
    assert all(h is None for h in lease_holders(range(3), env / "leases").values())


def _pool_main(args_path: str) -> None:
    """A pool parent, as ``autotune run --gpus`` is one: SIGTERM unwinds like Ctrl-C; exits 130."""
    from autotune.engine import install_signal_handlers, stop_all

    install_signal_handlers()
    a = json.loads(Path(args_path).read_text())
    try:
        with build_setup(_choices(a)) as setup:
            _pool(setup, Path(a["studies_dir"]), n_gpus=a["n_gpus"], n_trials=50)
    except KeyboardInterrupt:
        stop_all()
        sys.exit(130)


if __name__ == "__main__":
    if sys.argv[1] == "pool":
        _pool_main(sys.argv[2])
