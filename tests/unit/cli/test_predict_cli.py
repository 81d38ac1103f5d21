"""``autotune predict``: predicted figures from a calibration file, said to be predicted; bad input exits 2."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.predict import Calibration, EngineDefaults, this_machine

REPO = Path(__file__).resolve().parents[3]
COSTS = {"overhead_s": 0.004, "prefill_s_per_token": 2e-5, "decode_slowdown_s": 0.0, "step_s": 0.002,
         "step_s_per_seq": 0.0005, "host_s_per_token": None, "requests": 48}  # fmt: skip


def _run(argv: list[str]) -> int:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        main(argv)
        return 0
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:  # main() installs process-wide signal handlers
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.fixture
def cal(tmp_path: Path) -> Path:
    from autotune.predict import EngineCosts

    return Calibration(
        machine=this_machine(),
        model="tiny-l8",
        engine="vllm 0.0 (cpu build)",
        costs=EngineCosts.from_dict(COSTS),
        errors=(),
        defaults=EngineDefaults(2560, 8192, 128, 2048, 128),
        space=str(REPO / "search_spaces" / "cpu.yaml"),
    ).save(tmp_path / "cal.json")


def _args(cal: Path, *extra: str) -> list[str]:
    return ["predict", "--workload", str(REPO / "examples" / "rag.jsonl"), "--model", "tiny-l8",
            "--calibration", str(cal), *extra]  # fmt: skip


def test_one_configuration_is_predicted_and_said_to_be(cal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(_args(cal, "--config", "kv_cache_memory_bytes=128", "--config", "block_size=32")) == 0
    out = capsys.readouterr().out

    assert "PREDICTED, not measured: no engine was started" in out
    assert "kv_cache_memory_bytes=128M" in out and "predicted TTFT p50" in out and "TPOT p50" in out
    assert "no veto yet" in out  # no measured error in this calibration


def test_a_space_is_ranked(cal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        _run(_args(cal, "--space", str(REPO / "benchmarks" / "data" / "grid_space.yaml"), "--top", "3")) == 0
    )
    out = capsys.readouterr().out

    assert "top 3 of 18 candidates" in out and out.count("predicted TTFT p50") == 3
    lines = [ln for ln in out.splitlines() if ln[:2] in ("1.", "2.", "3.")]
    p90 = [float(ln.split(" p90 ")[1].split(" ms")[0]) for ln in lines]
    assert p90 == sorted(p90)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--config", "warp=3"], "'warp' is not a parameter of the space cpu (fix: one of"),
        (
            ["--config", "block_size=33"],
            "block_size=33: not a value of block_size (fix: one of [32, 64, 128])",
        ),
        (["--config", "block_size"], "not NAME=VALUE"),
    ],
)
def test_bad_config_exits_2(
    cal: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    assert _run(_args(cal, *extra)) == 2
    assert says in capsys.readouterr().err.replace("\n", "")


def test_bad_calibration_file_exits_2_naming_file_key_value(
    cal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(cal.read_text())
    data["costs"]["step_s"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))

    assert _run(_args(bad)) == 2
    err = capsys.readouterr().err.replace("\n", "")
    assert str(bad) in err and "'costs.step_s': 'fast'" in err and "fix:" in err


def test_another_model_is_refused(cal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _args(cal)
    argv[argv.index("tiny-l8")] = "other-model"
    assert _run(argv) == 2
    assert "calibrated on model tiny-l8" in capsys.readouterr().err


def test_a_mistyped_option_exits_2(cal: Path) -> None:
    assert _run([*_args(cal), "--confg", "x=1"]) == 2
