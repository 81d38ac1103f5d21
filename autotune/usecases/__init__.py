"""What a user asks the tool to do, one function a use case: ``run`` a study, one ``night`` (a group file's: ``run_group``, ``night_group``), ``bench``
a running server, ``compare`` two configurations. Each takes validated options (a
:class:`~autotune.studyfile.StudySpec`, plain values) and, where it speaks on the way, a
:class:`Reporter`; it returns a typed outcome that carries its exit code. None prints or exits: the
CLI (:mod:`autotune.cli`) parses, calls, shows and exits. The terminal text of trials and studies
(``trial_line``, ``study_table``, ...) lives here, so that a use case and a command say a trial alike.
"""

from __future__ import annotations

from autotune.usecases._bench import BenchOutcome, bench
from autotune.usecases._compare import CompareOutcome, compare
from autotune.usecases._group_night import night_group
from autotune.usecases._group_run import run_group
from autotune.usecases._night import NightOutcome, finish_night, night
from autotune.usecases._render import (
    FORMATS_ATTR,
    fmt_params,
    fmt_value,
    group_table,
    study_table,
    trial_line,
)
from autotune.usecases._reporter import Reporter, Transcript, TwoStreams
from autotune.usecases._run import RunOutcome, run

__all__ = [
    "FORMATS_ATTR",
    "BenchOutcome",
    "CompareOutcome",
    "NightOutcome",
    "Reporter",
    "RunOutcome",
    "Transcript",
    "TwoStreams",
    "bench",
    "compare",
    "finish_night",
    "fmt_params",
    "fmt_value",
    "group_table",
    "night",
    "night_group",
    "run",
    "run_group",
    "study_table",
    "trial_line",
]
