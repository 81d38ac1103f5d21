"""Overlapped starts against the fake server (each start made slow with FAKE_START_DELAY): the next
trial's engine starts while the current one replays, its trial takes it, the record says how much
of the start-up was hidden, and no engine outlives the study (issue 31, item 4). The real CPU build
runs the same path in tests/e2e (one study with --overlap-starts)."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.bench import ArrivalSpec
from autotune.engine import LaunchSpec
from autotune.memory import GpuMemory
from autotune.space import load_search_space
from autotune.study import (
    Objective,
    TrialHooks,
    TrialPolicy,
    load_or_create,
    read_record,
    run_study,
    standard_gates,
)
from autotune.trial import MemoryGuard, VllmEvaluator
from autotune.workload import load_workload
from tests.conftest import FAKE_LAUNCHER, MARK_ENV, REPO, processes_marked, write_fake_space
from tests.unit.conftest import FakeProbe

GiB = 2**30


def _setup(tmp_path: Path, mark: str, probe: FakeProbe, platform: str = "cpu") -> VllmEvaluator:
    wl = tmp_path / "wl.jsonl"
    with wl.open("w") as f:  # a replay of about 2.4 s: long enough for the next start to overlap it
        for i in range(9):
            f.write(json.dumps({"prompt": f"w{i} " * 40, "max_tokens": 4, "timestamp": i * 0.3}) + "\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        (REPO / "tests" / "data" / "model_configs" / "tiny-llama-2layer.json").read_text()
    )
    spec = LaunchSpec(
        model=str(model),
        launcher=FAKE_LAUNCHER,
        env={MARK_ENV: mark, "FAKE_START_DELAY": "3"},
        fixed_args=(("--max-model-len", "1024"), ("--kv-cache-memory-bytes", "64M")),
        startup_timeout_s=30,
        stop_timeout_s=2,
    )
    guard = MemoryGuard.for_model(str(model), platform, probe=probe)  # type: ignore[arg-type]
    return VllmEvaluator(
        spec=spec,
        workload=load_workload(wl),
        arrival=ArrivalSpec(mode="timestamps"),
        log_dir=tmp_path / "logs",
        memory=guard,
        warmup_requests=0,
    )


def test_each_next_engine_starts_during_the_replay_and_none_outlives_the_study(
    tmp_path: Path, mark: str
) -> None:
    evaluator = _setup(tmp_path, mark, FakeProbe())
    obj = Objective(metric="ttft_p90", min_throughput_ratio=0.0)
    study = load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", obj, seed=1)
    alive_during: list[int] = []
    next_up: list[bool] = []

    def on_done(rep: object) -> None:
        alive_during.append(len(processes_marked(mark)))
        # the engine started ahead was up before this trial stopped its own: vLLM refuses to start when
        # GPU memory comes free while it profiles (seen on the H200 before the wait was added)
        early = evaluator._early.pending
        next_up.append(early is not None and early.proc.ready_at is not None)

    run_study(
        study,
        TrialPolicy(
            space=load_search_space(write_fake_space(tmp_path)),
            objective=obj,
            gates=standard_gates(reuse_duplicates=False),
            overlap=True,
        ),
        evaluator,
        3,
        TrialHooks(on_done=on_done),
    )
    records = [read_record(t) for t in study.trials]
    assert [r.status.value for r in records] == ["ok"] * 3, [r.reason for r in records]
    first, *later = records
    assert "startup_overlapped" not in first.timings_s
    for rec in later:  # started while the trial before replayed: most of its 2 s+ start was hidden
        assert rec.timings_s["startup_overlapped"] > 1.0, rec.timings_s
        assert any(n.startswith("overlapped start:") for n in rec.notes), rec.notes
    # after trials 0 and 1 the next trial's engine was up (or starting); after the last, none
    assert alive_during[0] > 0 and alive_during[1] > 0
    assert next_up == [True, True, False]
    assert not processes_marked(mark)


def test_no_early_start_when_the_gpu_has_no_room_beside_the_running_engine(tmp_path: Path, mark: str) -> None:
    # an 80 GiB GPU with 60 GiB in use: the next engine's share (0.92 by default) cannot start beside it
    probe = FakeProbe(gpu_list=[GpuMemory(index=0, name="H", total=80 * GiB, free=20 * GiB, used=60 * GiB)])
    evaluator = _setup(tmp_path, mark, probe, platform="cuda")
    from autotune.space import EngineConfig

    why = evaluator.prestart(1, EngineConfig.recorded(("--gpu-memory-utilization", "0.3")))
    assert why is not None and "GPU 0 has 20.0 GiB free beside the running engine" in why, why
    assert not processes_marked(mark)
    # with room for its share (0.1 of 80 GiB + the margin) it starts, and a trial that is not its own stops it
    assert evaluator.prestart(1, EngineConfig.recorded(("--gpu-memory-utilization", "0.1"))) is None
    assert processes_marked(mark)
    evaluator.discard_prestart(2)  # another trial's: kept
    assert processes_marked(mark)
    evaluator.discard_prestart(1)
    assert not processes_marked(mark)
