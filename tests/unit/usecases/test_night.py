"""What follows a night, as a function (:func:`autotune.usecases.finish_night`): the exit code a
scheduler reads, the budget line, and the --on-promote hook whose failure keeps its own code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune import usecases
from autotune.errors import EXIT_BUDGET, EXIT_NOTHING_FEASIBLE, EXIT_REGRESSION, PromoteHookError
from autotune.nightly import NightRecord
from autotune.studyfile import resolve_spec

_KEPT = NightRecord(
    number=3,
    date="2026-12-06",
    fingerprints={},
    changes=[],
    metric="ttft_p90",
    baseline_figure={"median": 40.0},
    incumbent_label="night 2",
    incumbent_args=["--max-num-seqs", "64"],
    incumbent_env={},
    incumbent_params={"max_num_seqs": 64},
    incumbent_figure={"median": 30.0},
    noise_band=0.03,
    regression=False,
    regression_reason="",
    decision="kept",
    reason="no candidate beat the incumbent beyond the noise",
    promoted_trial=None,
    trials=4,
    budget_s=1800.0,
)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({}, 0),
        ({"regression": True, "regression_reason": "the incumbent is 20% slower"}, EXIT_REGRESSION),
        ({"decision": "nothing_feasible"}, EXIT_NOTHING_FEASIBLE),
        ({"budget_needed_s": 2700.0}, EXIT_BUDGET),
    ],
)
def test_a_nights_exit_code(tmp_path: Path, change: dict[str, object], code: int) -> None:
    said = usecases.Transcript()
    record = dataclasses.replace(_KEPT, **change)  # type: ignore[arg-type]
    spec = resolve_spec("nightly", flags={"study": "s"})
    assert usecases.finish_night(record, spec, tmp_path / "best.yaml", tmp_path, said) == code
    if code == EXIT_BUDGET:  # the last line names the budget the plan needs
        assert said.shown == [record.budget_line()]
        assert record.budget_line().endswith("(fix: --budget 45m or more)")
    else:
        assert said.shown == []


def test_a_failed_hook_after_a_promotion_keeps_its_exit_code_and_the_export(tmp_path: Path) -> None:
    export = tmp_path / "best.yaml"
    export.write_text("max-num-seqs: 128\n")
    record = dataclasses.replace(_KEPT, decision="promoted", promoted_trial=7)
    spec = resolve_spec("nightly", flags={"study": "s", "on_promote": "exit 7"})
    said = usecases.Transcript()
    with pytest.raises(PromoteHookError) as err:
        usecases.finish_night(record, spec, export, tmp_path, said)
    assert err.value.exit_code == 7 and f"the export {export} is kept" in str(err.value)
    assert [line for line in said.said if str(line).startswith("--on-promote: ")], said.said
    assert export.read_text() == "max-num-seqs: 128\n"
