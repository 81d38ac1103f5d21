"""Self-contained HTML reports: one per study, and an index across nightly runs.

Each report opens offline (plotly.js embedded, or, for the nights of one study, one shared
``plotly.min.js`` beside them; no font or script from the network). Reads studies through :mod:`autotune.study`'s typed records and per-request timings
through :mod:`autotune.tuning`; writes only the file it is asked to write.
"""

from __future__ import annotations

from autotune.report._capacity import capacity_page_sections
from autotune.report._group import GroupTrialView, GroupView, group_view, is_group_study, write_group_report
from autotune.report._html import page, write_html, write_plotly_js
from autotune.report._nightly import write_nightly_index
from autotune.report._nights import figure_text
from autotune.report._study import render_study_report, write_study_report

__all__ = [
    "GroupTrialView",
    "GroupView",
    "capacity_page_sections",
    "figure_text",
    "group_view",
    "is_group_study",
    "page",
    "render_study_report",
    "write_group_report",
    "write_html",
    "write_nightly_index",
    "write_plotly_js",
    "write_study_report",
]
