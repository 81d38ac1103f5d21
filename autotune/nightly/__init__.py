"""Nightly tuning: re-measure what is deployed, warm-start the search, promote only a proven
gain, flag regressions against tonight's own noise, and keep one record per night. One night for
N >= 1 engines: ``run_night(engine_night(...))`` for one engine, ``run_night(group_night(...))``
for a group of several models on one server."""

from __future__ import annotations

from autotune.nightly._group_night import group_night
from autotune.nightly._history import NightRecord, nights, save_night
from autotune.nightly._night import NightOptions, engine_night, run_night
from autotune.nightly._plan import process_start
from autotune.nightly._promote import keep_promoted, promoted_history, rollback, run_on_promote
from autotune.nightly._replay_bound import bound_night_replay
from autotune.nightly._reports import history_table, write_night_reports

__all__ = [
    "NightOptions",
    "NightRecord",
    "bound_night_replay",
    "engine_night",
    "group_night",
    "history_table",
    "keep_promoted",
    "nights",
    "process_start",
    "promoted_history",
    "rollback",
    "run_night",
    "run_on_promote",
    "save_night",
    "write_night_reports",
]
