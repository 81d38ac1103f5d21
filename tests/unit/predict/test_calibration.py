"""A calibration file round-trips, and a bad one is refused in one line naming file, key, value and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.predict import Calibration, EngineDefaults, this_machine
from tests.unit.predict.conftest import TRUE


def calibration(space: str | None = "search_spaces/cpu.yaml", model: str = "/models/tiny-l8") -> Calibration:
    return Calibration(
        machine=this_machine(),
        model=model,
        engine="vllm 0.0 (cpu build)",
        costs=TRUE,
        errors=(0.05, -0.1, 0.02),
        defaults=EngineDefaults(
            kv_tokens=2560, kv_bytes_per_token=8192, block_size=128, batched_tokens=2048, max_seqs=128
        ),
        space=space,
    )


def test_round_trip(tmp_path: Path) -> None:
    cal = calibration()
    path = cal.save(tmp_path / "cal.json")

    assert Calibration.load(path) == cal
    assert json.loads(path.read_text())["version"] == 1


@pytest.mark.parametrize(
    ("change", "key", "fix"),
    [
        ({"version": 7}, "'version': 7", "fix: 1"),
        ({"costs": {**TRUE.as_dict(), "prefill_s_per_token": -1}}, "'costs.prefill_s_per_token': -1", "fix:"),
        ({"costs": {**TRUE.as_dict(), "warp": 2}}, "'costs.warp': 2", "fix: remove it"),
        ({"model": ""}, "'model': ''", "fix:"),
        ({"errors": ["x"]}, "'errors': ['x']", "fix: []"),
        ({"extra": 1}, "'extra': 1", "fix: remove it"),
        ({"defaults": {"block_size": 128}}, "'defaults.kv_tokens': None", "fix:"),
    ],
)
def test_a_bad_key_names_file_key_value_and_fix(
    tmp_path: Path, change: dict[str, object], key: str, fix: str
) -> None:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**calibration().as_dict(), **change}))

    with pytest.raises(ConfigError) as info:
        Calibration.load(path)

    message = str(info.value)
    assert str(path) in message and key in message and fix in message and "\n" not in message


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the calibration file"):
        Calibration.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match=r"bad.json: not JSON"):
        Calibration.load(tmp_path / "bad.json")
