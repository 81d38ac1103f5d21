"""The terminal's text for trials and studies, for the commands: it lives with the use cases that say
it (:mod:`autotune.usecases`), so that a use case and a command render a trial alike."""

from __future__ import annotations

from autotune.usecases import FORMATS_ATTR, fmt_params, fmt_value, group_table, study_table, trial_line

__all__ = ["FORMATS_ATTR", "fmt_params", "fmt_value", "group_table", "study_table", "trial_line"]
