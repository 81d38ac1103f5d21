"""One pipeline for N >= 1 engines (issue 46): the same single-engine night on the fake server, run
by today's code, leaves the same decisions, records, export and printed lines as the code did
before the night became one pipeline for a group of one. ``tests/data/nightly_same.json`` was
written by the code before that change (AUTOTUNE_WRITE_NIGHTLY_SAME=1 writes it again); what a
run measures (times, figures, costs) is replaced by its shape, the rest is compared as it is."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import optuna

from tests.conftest import REPO, wait_no_processes
from tests.e2e.test_cli import _run
from tests.e2e.test_nightly import _env, _night

SPACE = """\
name: s
platform: cpu
parameters:
  block_size: {type: categorical, choices: [32, 64, 128], flag: --block-size}
"""

FIXTURE = REPO / "tests" / "data" / "nightly_same.json"
_MEASURED = {"value", "startup_s", "median", "low", "high", "duration_s", "noise_band"}
_NUMBER = re.compile(r"\d+(\.\d+)?")


def _shape(value: Any, key: str = "") -> Any:
    """``value`` with what a run measures replaced by its type, paths by their last part."""
    if isinstance(value, dict):
        return {k: _shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(v, key) for v in value]
    if key == "pass_spread":  # measured when the run had passes enough
        return "-"
    if key in _MEASURED or (key in ("runs", "run_costs") and isinstance(value, float)):
        return type(value).__name__
    if isinstance(value, str):
        return _NUMBER.sub("N", re.sub(r"\S*/(\S+)", r"\1", value))
    return value


def _lines(text: str) -> list[str]:
    """Printed lines with numbers and paths made alike: which lines, in which order, is the point."""
    return [_NUMBER.sub("N", re.sub(r"\S*/(\S+)", r"\1", line)).rstrip() for line in text.splitlines()]


def _night_of(tmp: Path) -> dict[str, Any]:
    mark = uuid.uuid4().hex
    args = _night(tmp, max_trials=3, budget="5m")
    (tmp / "space.yaml").write_text(SPACE)  # block 64 at ~0.56x the default 128's time to first token
    result = _run(args, mark, tmp, env=_env(mark, FAKE_TTFT_SCALE="50"))
    assert result.returncode == 0, result.stderr
    assert not wait_no_processes(mark), "engine processes outlived the night"
    st = optuna.load_study(study_name="prod", storage=f"sqlite:///{tmp / 'studies' / 'prod.db'}")
    (record,) = [v for k, v in st.user_attrs.items() if k.startswith("night:")]
    export = tmp / "deployed.yaml"
    return {
        "record": _shape({k: v for k, v in record.items() if k not in ("date", "plan", "fingerprints")}),
        "record_keys": sorted(record),
        "plan_keys": sorted(record["plan"]),
        "fingerprint_keys": {k: sorted(v) for k, v in sorted(record["fingerprints"].items())},
        "trials": [
            {
                "number": t.number,
                "params": t.params,
                "state": t.state.name,
                "night": t.user_attrs.get("night"),
            }
            for t in st.get_trials(deepcopy=False)
        ],
        "export": [
            re.sub(r"\S*/(\S+)", r"\1", line)
            for line in export.read_text().splitlines()
            if not line.startswith("#")
        ]
        if export.exists()
        else None,
        "stdout": _lines(result.stdout),
        "stderr": _lines(result.stderr),
    }


def test_a_single_engine_night_decides_records_and_exports_as_before(tmp_path: Path) -> None:
    got = _night_of(tmp_path)
    if os.environ.get("AUTOTUNE_WRITE_NIGHTLY_SAME"):
        FIXTURE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(FIXTURE.read_text())
    for part in want:
        if part in ("stdout", "stderr"):  # the console wraps at its width, after paths of any length
            assert _flat(got[part]) == _flat(want[part]), (part, got["record"]["reason"])
        else:
            assert got[part] == want[part], (part, got["record"]["reason"])


def _flat(lines: list[str]) -> str:
    """Printed words in order, wherever the console wrapped them."""
    return " ".join(" ".join(lines).split())
