"""One record type for the nights of N >= 1 engines (issue 46): a group study's night kept before
the night was one pipeline (``group_night:NNNN``) opens as a NightRecord with its summary and its
history row as they were; a group's new night and the old one read back in order; one engine's
record keeps no group key (no vLLM, no server)."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.nightly import NightRecord, history_table, nights, save_night
from autotune.tuning import GROUP_FINGERPRINT_ATTR

OLD = {  # dataclasses.asdict(GroupNight) as the group night kept it before
    "number": 1,
    "started_at": "2026-12-01T02:00:00+00:00",
    "changes": ["rag: workload changed"],
    "incumbent": "deployed group (trial 3)",
    "incumbent_trial": 3,
    "incumbent_value": 0.912,
    "regression": False,
    "trials": [7, 8],
    "best": 8,
    "decision": "promoted",
    "reason": "promoted trial 8: group objective 0.850 against 1.000",
    "export": "/srv/deployed",
    "run_costs": [31.5, 30.2],
    "duration_s": 600.0,
}


def _study(tmp_path: Path) -> tuple[optuna.Study, str]:
    url = f"sqlite:///{tmp_path / 'g.db'}"
    study = optuna.create_study(study_name="g", storage=url)
    study.set_user_attr(GROUP_FINGERPRINT_ATTR, {})
    study.set_user_attr("group_night:0001", OLD)
    return study, url


def test_a_group_night_kept_before_opens_with_its_summary_and_history_row(tmp_path: Path) -> None:
    study, _ = _study(tmp_path)
    (night,) = nights(study)
    assert (
        night.group is not None
        and night.group["incumbent_trial"] == 3
        and night.group["trial_numbers"] == [7, 8]
    )
    assert night.promoted_trial == 8 and night.trials == 2 and night.run_costs == [31.5, 30.2]
    assert night.summary() == (
        "Group night 1: incumbent deployed group (trial 3) 0.912 against tonight's baseline group; "
        "No regression. promoted trial 8: group objective 0.850 against 1.000 (2 group trial(s), 10.0 min)"
    )
    table = history_table("g", None, tmp_path)
    assert table.title == "nights of group study g (group objective, baseline group = 1.0)"
    assert table.rows == (
        (
            "1", "2026-12-01T02:00", "deployed group (trial 3)", "0.912", "no", "promoted #8", "2", "10.0 min",
            "promoted trial 8: group objective 0.850 against 1.000; changed: rag: workload changed",
        ),
    )  # fmt: skip


def test_a_new_group_night_follows_the_old_one_and_one_engine_keeps_no_group_key(tmp_path: Path) -> None:
    study, _ = _study(tmp_path)
    old = nights(study)[0]
    new = NightRecord.from_dict({**old.as_dict(), "number": 2, "group": {**(old.group or {}), "best": None}})
    save_night(study, new)
    assert [n.number for n in nights(study)] == [1, 2] and nights(study)[1].group == new.group
    one = NightRecord.from_dict({**old.as_dict(), "group": None})
    assert "group" not in one.as_dict() and "Group night" not in one.summary()
