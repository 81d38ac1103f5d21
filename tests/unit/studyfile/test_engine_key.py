"""``engine:`` in the study file names the engine a study tunes (vllm, the only one today)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engine import ENGINES_BY_NAME, VLLM, engine_named
from autotune.errors import ConfigError
from autotune.studyfile import ENGINES, StudySpec, load_study_file, resolve_spec, spec_fingerprint


def test_a_study_file_names_its_engine_and_vllm_is_the_default(tmp_path: Path) -> None:
    named = tmp_path / "named.yaml"
    named.write_text("model: /m\nengine: vllm\n")
    assert resolve_spec("run", flags={}, file=load_study_file(named)).engine == "vllm"
    plain = tmp_path / "plain.yaml"
    plain.write_text("model: /m\n")
    assert resolve_spec("run", flags={}, file=load_study_file(plain)).engine == "vllm"
    assert engine_named("vllm") is VLLM


def test_an_unknown_engine_is_one_line_naming_the_key_the_value_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "study.yaml"
    path.write_text("model: /m\nengine: sglang\n")
    with pytest.raises(ConfigError) as exc:
        load_study_file(path)
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.exit_code == 2
    assert f"{path}:2: engine: 'sglang'" in msg and "(fix: one of vllm)" in msg


def test_every_engine_the_file_may_name_is_one_the_engine_package_has() -> None:
    assert set(ENGINES) == set(ENGINES_BY_NAME)


def test_the_default_engine_leaves_existing_fingerprints_as_they_were() -> None:
    """Hashes computed at 4e6b1d9, before the key existed: existing study databases still open."""
    contents = {"workload": "w1", "model": "m1", "space": "s1"}
    plain = StudySpec(workload=Path("a/rag.jsonl"), model="x")
    capacity = StudySpec(
        workload=Path("a/rag.jsonl"), model="x", objective="capacity", slo=("ttft_p90=800ms",)
    )
    assert spec_fingerprint(plain, contents) == "7e9ec963f6bd40cf"
    assert spec_fingerprint(capacity, contents) == "9d5c6f12bfa0ac86"
    assert spec_fingerprint(plain.model_copy(update={"engine": "vllm"}), contents) == "7e9ec963f6bd40cf"
