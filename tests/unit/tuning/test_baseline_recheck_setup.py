"""The setup's re-check of the baseline plan reads the machine as it is when the baseline runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from autotune.studyfile import StudySpec
from autotune.tuning import build_setup, plan_baseline, recheck_baseline
from tests.unit.conftest import FakeProbe

GiB = 1024**3


def test_defaults_that_fit_at_the_plan_and_not_at_the_baseline_give_the_reference(
    tmp_path: Path, tiny_model: Path
) -> None:
    wl = tmp_path / "w.jsonl"
    wl.write_text(
        "".join(json.dumps({"prompt": f"q{i} " + "w " * 30, "max_tokens": 2}) + "\n" for i in range(4))
    )
    spec = StudySpec(
        workload=wl, model=str(tiny_model), engine_args=("--max-model-len=2048",), check_args=False
    )
    with build_setup(spec) as setup:
        assert setup.guard is not None
        roomy = dataclasses.replace(
            setup, guard=dataclasses.replace(setup.guard, probe=FakeProbe(host=(64 * GiB, 63 * GiB)))
        )
        assert plan_baseline(roomy).defaults_fit and recheck_baseline(roomy) is None
        # another tenant takes the memory between the plan and the baseline's launch
        tight = FakeProbe(host=(16 * GiB, 3 * GiB), node=(16 * GiB, 3 * GiB))
        crowded = dataclasses.replace(setup, guard=dataclasses.replace(setup.guard, probe=tight))
        reference = recheck_baseline(crowded)
        assert reference and "kv_cache_memory_bytes" in reference, crowded.fit_reasons()
