"""The nightly index from hand-made night records (the nightly command hands the same shape)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.report import write_nightly_index

NIGHTS = [
    {
        "date": "2026-11-27",
        "objective": "ttft_p90",
        "incumbent_median": 420.0,
        "incumbent_low": 400.0,
        "incumbent_high": 445.0,
        "promoted": True,
        "regression": False,
        "fingerprint_changes": [],
        "report_path": "nights/2026-11-27/report.html",
    },
    {
        "date": "2026-11-28",
        "incumbent": {"median": 300.0, "low": 290.0, "high": 315.0},  # the nested form
        "promoted": False,
        "regression": False,
        "fingerprint_changes": [],
        "report_path": "nights/2026-11-28/report.html",
    },
    {
        "date": "2026-11-29",
        "objective": "ttft_p90",
        "incumbent_median": 390.0,
        "incumbent_low": 370.0,
        "incumbent_high": 410.0,
        "promoted": False,
        "regression": True,
        "fingerprint_changes": ["vllm 0.31.0 -> 0.32.0", "workload prompt p90 640 -> 1,210 tokens"],
        "reason": "incumbent 390.0 ms is worse than last night's 300.0 ms beyond tonight's noise band",
        "report_path": None,
    },
]


def _rows(page: str) -> list[str]:
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", body)


def test_index_lists_the_nights_latest_first_with_band_decision_and_changes(tmp_path: Path) -> None:
    path = write_nightly_index(NIGHTS, tmp_path / "index.html")
    page = path.read_text()
    rows = _rows(page)
    assert [re.search(r"\d{4}-\d\d-\d\d", r)[0] for r in rows] == ["2026-11-29", "2026-11-28", "2026-11-27"]  # type: ignore[index]
    latest, middle, first = rows
    assert "390.0" in latest and "370.0-410.0" in latest and ">regression<" in latest
    assert "vllm 0.31.0 -&gt; 0.32.0; workload prompt p90 640 -&gt; 1,210 tokens" in latest
    assert "beyond tonight&#x27;s noise band" in latest
    assert "300.0" in middle and "290.0-315.0" in middle and ">kept<" in middle and ">none<" in middle
    assert ">promoted<" in first
    assert "1 promotion(s), 1 regression(s)" in page


def test_each_night_links_its_report_relative_to_the_index(tmp_path: Path) -> None:
    absolute = dict(NIGHTS[0], report_path=str(tmp_path / "nights" / "a" / "report.html"))
    page = write_nightly_index([absolute, NIGHTS[1], NIGHTS[2]], tmp_path / "index.html").read_text()
    links = re.findall(r'<a href="([^"]+)">report</a>', page)
    assert links == [
        "nights/2026-11-28/report.html",
        "nights/a/report.html",
    ]  # latest first; none for the 29th
    assert "http" not in page.replace(page[page.index("<script") : page.index("</script>")], "")


def test_the_trend_marks_promotions_and_regressions_on_the_incumbent_line(tmp_path: Path) -> None:
    page = write_nightly_index(NIGHTS, tmp_path / "index.html").read_text()
    assert 'id="plot-nightly"' in page and page.count("Plotly.newPlot(") == 1
    plot = page[page.index('id="plot-nightly"') :]
    assert _trace(plot, "incumbent median") == (
        ["2026-11-27", "2026-11-28", "2026-11-29"],
        [420.0, 300.0, 390.0],
    )
    # the noise band runs through every night's high, then back through the lows
    assert _trace(plot, "noise band (min-max of the night)")[1] == [445.0, 315.0, 410.0, 370.0, 290.0, 400.0]
    assert _trace(plot, "promotion") == (["2026-11-27"], [420.0])
    assert _trace(plot, "regression") == (["2026-11-29"], [390.0])


def _trace(plot: str, name: str) -> tuple[list[str], list[float]]:
    """A trace of the figure as plotly.js receives it (the first argument after the div id)."""
    start = plot.index("[", plot.index("Plotly.newPlot("))
    data, _ = json.JSONDecoder().raw_decode(plot[start:])
    (trace,) = [t for t in data if t.get("name") == name]
    return list(trace["x"]), [float(v) for v in trace["y"]]


def test_no_night_yet_and_nights_without_figures_say_so(tmp_path: Path) -> None:
    empty = write_nightly_index([], tmp_path / "empty.html").read_text()
    assert "No night has run yet." in empty and "Plotly.newPlot(" not in empty
    unmeasured = write_nightly_index(
        [
            {
                "date": "2026-11-30",
                "promoted": False,
                "regression": True,
                "fingerprint_changes": "GPU count 2 -> 1",
            }
        ],
        tmp_path / "none.html",
    ).read_text()
    assert "no night measured its incumbent" in unmeasured and "GPU count 2 -&gt; 1" in unmeasured


def test_a_night_without_a_date_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"night record 1 has no 'date' \(keys: promoted\)"):
        write_nightly_index([NIGHTS[0], {"promoted": True}], tmp_path / "index.html")
    assert not (tmp_path / "index.html").exists()


def test_the_trend_breaks_where_the_workload_changed_and_names_the_change(tmp_path: Path) -> None:
    """A new day's traffic is another workload: its incumbent is not drawn on the same line (a lower
    figure on easier traffic would read as an improvement), and the break says what changed."""
    changed = dict(
        NIGHTS[2], regression=False, workload_changes=["requests 240 -> 96", "prefix reuse 0.82 -> 0.11"]
    )
    page = write_nightly_index([NIGHTS[0], NIGHTS[1], changed], tmp_path / "index.html").read_text()
    plot = page[page.index('id="plot-nightly"') :]
    assert _trace(plot, "incumbent median") == (["2026-11-27", "2026-11-28"], [420.0, 300.0])
    assert _trace(plot, "incumbent median (workload 2)") == (["2026-11-29"], [390.0])
    assert _trace(plot, "noise band (min-max of the night)")[1] == [445.0, 315.0, 290.0, 400.0]
    # plotly.js's JSON escapes ">" as \u003e
    assert "workload changed: requests 240 -\\u003e 96; prefix reuse 0.82 -\\u003e 0.11" in plot
