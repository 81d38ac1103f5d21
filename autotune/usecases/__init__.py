"""What a user asks the tool to do, one function a use case: ``run`` a study, one ``night``, ``bench``
a running server, ``compare`` two configurations. Each takes validated options (a
:class:`~autotune.studyfile.StudySpec`, plain values) and a :class:`Reporter` for what it says on the
way, and returns a typed outcome that carries its exit code. None prints or exits: the CLI
(:mod:`autotune.cli`) parses, calls, shows and exits.
"""

from __future__ import annotations

from autotune.usecases._bench import BenchOutcome, bench
from autotune.usecases._compare import CompareOutcome, compare
from autotune.usecases._night import NightOutcome, finish_night, night
from autotune.usecases._open import announce_prior, enqueue_prior, open_and_announce
from autotune.usecases._render import (
    FORMATS_ATTR,
    fmt_params,
    fmt_value,
    group_table,
    study_table,
    trial_line,
)
from autotune.usecases._reporter import Reporter, Transcript
from autotune.usecases._run import RunOutcome, run, say_trial

__all__ = [
    "FORMATS_ATTR",
    "BenchOutcome",
    "CompareOutcome",
    "NightOutcome",
    "Reporter",
    "RunOutcome",
    "Transcript",
    "announce_prior",
    "bench",
    "compare",
    "enqueue_prior",
    "finish_night",
    "fmt_params",
    "fmt_value",
    "group_table",
    "night",
    "open_and_announce",
    "run",
    "say_trial",
    "study_table",
    "trial_line",
]
