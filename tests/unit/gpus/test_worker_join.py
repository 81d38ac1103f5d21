"""What a worker carries (its spec), and what keeps it out of a study made for something else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from autotune.errors import ConfigError
from autotune.study import Objective, load_or_create
from autotune.studyfile import StudySpec
from autotune.tuning import (
    FINGERPRINT_ATTR,
    GpuGroup,
    TuningSetup,
    WorkerSpec,
    build_setup,
    check_fingerprint,
    record_devices,
)

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "model_configs"
SPACE = """
name: small
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64], flag: --block-size}
"""


def _choices(tmp_path: Path, **kw: object) -> StudySpec:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / "tiny-llama-2layer.json").read_text())
    wl = tmp_path / "wl.jsonl"
    if not wl.exists():
        wl.write_text(
            '{"prompt": "hello there", "max_tokens": 4, "timestamp": 0}\n'
            '{"prompt": "and again", "max_tokens": 4, "timestamp": 0.5}\n'
        )
    space = tmp_path / "space.yaml"
    if not space.exists():
        space.write_text(SPACE)
    base: dict[str, object] = {"workload": wl, "model": str(model), "space": space, "check_args": False}
    return StudySpec(**{**base, **kw})  # type: ignore[arg-type]


def _setup(choices: StudySpec) -> Iterator[TuningSetup]:
    with build_setup(choices) as setup:
        yield setup


def _study(tmp_path: Path) -> optuna.Study:
    return load_or_create(f"sqlite:///{tmp_path / 's.db'}", "s", Objective(), seed=0)


def test_a_spec_reads_back_as_written(tmp_path: Path) -> None:
    choices = _choices(
        tmp_path,
        engine_args=("--max-model-len=2048", "--enforce-eager"),
        rate=2.0,
        seed=7,
        slo=("ttft_p90=800ms",),
        sample=5,
    )
    spec = WorkerSpec(
        choices=choices,
        study="s",
        studies_dir=tmp_path / "studies",
        group=GpuGroup(slot=3, gpus=(6, 7), names=("H200", "H200")),
        seed=10,
        n_trials=4,
        run_id="abc",
        run_trials=4,
        baseline_since=123.5,
        parent_pid=42,
        log_path=tmp_path / "w.log",
    )
    again = WorkerSpec.load(spec.dump(tmp_path / "w.json"))
    assert again == spec
    assert isinstance(again.choices.workload, Path) and isinstance(again.group.gpus, tuple)


def test_a_worker_with_the_same_study_joins_and_one_with_another_workload_is_refused(tmp_path: Path) -> None:
    study = _study(tmp_path)
    for setup in _setup(_choices(tmp_path)):
        check_fingerprint(study, setup)  # records it: the study had none
        recorded = study.user_attrs[FINGERPRINT_ATTR]
        assert set(recorded) == {"space", "workload", "model", "tuned"}
        check_fingerprint(study, setup)  # the same: joins
    other = tmp_path / "other.jsonl"
    other.write_text('{"prompt": "something else", "max_tokens": 4}\n')
    for setup in _setup(_choices(tmp_path, workload=other)):
        with pytest.raises(
            ConfigError, match=r"measures something else: workload: the study measures wl.jsonl"
        ):
            check_fingerprint(study, setup)
    for setup in _setup(_choices(tmp_path, speed=3.0)):
        # the same file replayed faster is another workload
        with pytest.raises(ConfigError, match="workload"):
            check_fingerprint(study, setup)
        said = check_fingerprint(study, setup, refuse=False)  # `autotune run` resuming: told, not refused
        assert len(said) == 1 and said[0].startswith("workload:")


def test_another_space_or_model_is_refused(tmp_path: Path) -> None:
    study = _study(tmp_path)
    for setup in _setup(_choices(tmp_path)):
        check_fingerprint(study, setup)
    for setup in _setup(_choices(tmp_path, engine_args=("--enforce-eager",))):
        with pytest.raises(ConfigError, match=r"space: .*fixed flags --enforce-eager"):
            check_fingerprint(study, setup)
    model2 = tmp_path / "model2"
    model2.mkdir()
    (model2 / "config.json").write_text((CONFIGS / "llama-3-8b.json").read_text())
    for setup in _setup(_choices(tmp_path, model=str(model2))):
        with pytest.raises(ConfigError, match=r"model: .*model2"):
            check_fingerprint(study, setup)
    # the same model files in another directory (another host's path) are the same model
    model3 = tmp_path / "elsewhere"
    model3.mkdir()
    (model3 / "config.json").write_text((CONFIGS / "tiny-llama-2layer.json").read_text())
    for setup in _setup(_choices(tmp_path, model=str(model3))):
        check_fingerprint(study, setup)


def test_devices_are_recorded_and_mixed_models_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    study = _study(tmp_path)
    same = (GpuGroup(0, gpus=(0,), names=("NVIDIA H200",)), GpuGroup(1, gpus=(1,), names=("NVIDIA H200",)))
    assert record_devices(study, same) is None
    keys = [k for k in study.user_attrs if k.startswith("worker:")]
    assert len(keys) == 2 and study.user_attrs[keys[0]]["names"] == ["NVIDIA H200"]
    said = record_devices(study, (GpuGroup(2, gpus=(2,), names=("NVIDIA A100",)),))
    assert said is not None and "NVIDIA A100" in said and study.user_attrs["gpu_mix"] == said
    assert "not comparable" in caplog.text


def test_a_gpu_held_by_another_tenant_is_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from autotune.memory import read_machine_facts
    from tests.unit.conftest import FakeProbe, h100

    study = _study(tmp_path)
    facts = read_machine_facts(FakeProbe(gpu_list=[h100(index=0), h100(free=50 * 2**30, index=1)]))
    record_devices(
        study, (GpuGroup(0, gpus=(0,), names=("H100",)), GpuGroup(1, gpus=(1,), names=("H100",))), facts
    )
    entries = {k.rsplit(":", 1)[1]: v for k, v in study.user_attrs.items() if k.startswith("worker:")}
    assert "note" not in entries["0"] and entries["1"]["used_gib_at_start"] == [29.2]
    assert "another tenant may slow its trials" in entries["1"]["note"] and "GPU 1" in caplog.text
