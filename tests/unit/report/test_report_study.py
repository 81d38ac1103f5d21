"""The study report from a real Optuna study on SQLite (trials measured by an in-process evaluator)."""

from __future__ import annotations

import re
import shutil
import signal
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import optuna
import pytest

from autotune.errors import StorageError
from autotune.export import export_best
from autotune.report import render_study_report, write_study_report
from autotune.report._data import collect, pareto_front, request_cdf
from autotune.report._plots import pareto_figure
from autotune.study import Objective, load_or_create
from tests.unit.report.conftest import CONFIGS, EVIDENCE, ONE_PARAM, StudyMaker, timings_for

PLOTS = ("plot-objective", "plot-pareto", "plot-importance", "plot-latency", "plot-memory")


class _Tables(HTMLParser):
    """Every table of a page: {id or index: (headers, rows of cell texts)}, and each cell's data-v."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, tuple[list[str], list[list[str]]]] = {}
        self.sort_values: dict[str, list[list[str | None]]] = {}
        self._id: str | None = None
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._vals: list[str | None] | None = None
        self._in_head = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._id = a.get("id") or str(len(self.tables))
            self.tables[self._id] = ([], [])
            self.sort_values[self._id] = []
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._id is not None:
            self._row, self._vals = [], []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            assert self._vals is not None
            self._vals.append(a.get("data-v"))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._id is not None:
            headers, rows = self.tables[self._id]
            if self._in_head:
                headers.extend(self._row)
            else:
                rows.append(self._row)
                assert self._vals is not None
                self.sort_values[self._id].append(self._vals)
            self._row = None
        elif tag == "thead":
            self._in_head = False
        elif tag == "table":
            self._id = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> _Tables:
    p = _Tables()
    p.feed(page)
    return p


def test_report_draws_every_plot_with_plotly_embedded_once(make_study: StudyMaker) -> None:
    page = render_study_report(make_study(CONFIGS))
    for div in PLOTS:
        assert f'id="{div}"' in page, div
        assert f'Plotly.newPlot(\n                        "{div}"' in page or f'"{div}"' in page
    assert page.count("Plotly.newPlot(") == len(PLOTS)
    assert page.count("plotly.js v") >= 1  # the library itself, inline
    assert "Not shown" not in page


def test_nothing_in_the_page_refers_to_a_network_address(make_study: StudyMaker) -> None:
    """Outside the embedded plotly.js (whose code names URLs it never loads here: the browser test
    proves that with the network off), the page holds no URL at all: no script, stylesheet, font,
    image or link from a network."""
    from plotly.offline import get_plotlyjs

    page = render_study_report(make_study(CONFIGS))
    library = get_plotlyjs()
    assert page.count(library) == 1  # inline, unmodified, once
    ours = page.replace(library, "")
    assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", ours, flags=re.IGNORECASE) == []
    assert "<link" not in ours.lower() and "@import" not in ours and "@font-face" not in ours
    assert re.findall(r"<script[^>]*\bsrc=", ours, flags=re.IGNORECASE) == []


def test_trial_table_has_every_trial_parameter_figure_and_failure(make_study: StudyMaker) -> None:
    study = make_study(CONFIGS)
    headers, rows = _tables(render_study_report(study)).tables["trial-table"]
    for col in (
        "#",
        "status",
        "failure",
        "block_size",
        "max_num_seqs",
        "ttft_p90",
        *(f"{m}_{p}" for m in ("ttft", "tpot", "itl") for p in ("p50", "p90", "p99")),
        "out tok/s",
        "goodput req/s",
        "prefix hit",
        "CPU offload hit",
        "KV tokens",
        "GPU peak GiB",
        "host RSS GiB",
        "start-up s",
        "evidence",
    ):
        assert col in headers, col
    assert len(rows) == len(study.trials) == 1 + len(CONFIGS)
    by_number = {int(r[0]): dict(zip(headers, r, strict=True)) for r in rows}
    oom = by_number[4]  # block 64 with 256 sequences: out of memory
    assert oom["status"] == "failed"
    assert oom["failure"] == "out_of_memory"
    assert oom["evidence"] == EVIDENCE  # the root-cause line, not the log's first line
    assert oom["ttft_p90"] == "-" and oom["start-up s"] == "12"
    base = by_number[0]
    assert base["status"] == "ok (baseline)" and base["block_size"] == "default"
    assert float(base["ttft_p90"]) == pytest.approx(study.trials[0].value, abs=0.05)
    assert base["KV tokens"] == "2,048" and base["GPU peak GiB"] == "3.00" and base["prefix hit"] == "25%"
    starved = by_number[3]  # max_num_seqs=8 halves throughput: violates the throughput constraint
    assert starved["status"].startswith("ok; violates") and "throughput" in starved["status"]


def test_trial_table_sorts_numbers_by_value_not_text(make_study: StudyMaker) -> None:
    """Each numeric cell carries the value the page's sort uses (not its formatted text); an
    unmeasured cell carries none (sorted last). The browser test clicks a header."""
    study = make_study(CONFIGS)
    tables = _tables(render_study_report(study))
    headers, rows = tables.tables["trial-table"]
    col = headers.index("ttft_p90")
    values = [v[col] for v in tables.sort_values["trial-table"]]
    for row, v in zip(rows, values, strict=True):
        trial = study.trials[int(row[0])]
        if row[col] == "-":
            assert v is None
        else:
            assert float(v or "nan") == pytest.approx(trial.value)
    assert '<table id="trial-table" class="sortable">' in render_study_report(study)


def test_summary_shows_baseline_vs_best_confirmation_and_the_exported_command(make_study: StudyMaker) -> None:
    study = make_study(CONFIGS)
    study.set_user_attr(
        "confirmation_1",
        {
            "trial": 1,
            "confirmed": True,
            "why": "ttft_p90: median 540.0 -> 180.0 (+66.7% better), gain above the 3% noise floor",
            "comparison": {
                "a": {"name": "baseline", "median": {"ttft_p90": 540.0}, "spread": {"ttft_p90": [500.0, 580.0]},
                      "values": {"ttft_p90": [500.0, 580.0]}},
                "b": {"name": "trial 1", "median": {"ttft_p90": 180.0}, "spread": {"ttft_p90": [170.0, 190.0]},
                      "values": {"ttft_p90": [170.0, 190.0]}},
            },
        },
    )  # fmt: skip
    page = render_study_report(study)
    _, exported = export_best(study, out=None)
    assert exported.command in page.replace("&#x27;", "'")
    assert "confirmed</b>: ttft_p90: median 540.0 -&gt; 180.0" in page
    assert "540.0 ms [500.0-580.0] (2)" in page and "0.33x" in page
    assert "Best configuration: <code>block_size=16, max_num_seqs=64</code>" in page
    assert "vllm 0.32.0 (test)" in page and "--max-model-len 2048" in page  # engine, fixed flags
    assert "--port" not in page.split('id="trials"')[0]  # per-trial flags are not "fixed flags"


def test_an_unconfirmed_best_says_the_baseline_is_exported(make_study: StudyMaker) -> None:
    study = make_study(CONFIGS)
    study.set_user_attr("confirmation_1", {"trial": 1, "confirmed": False, "why": "ranges overlap"})
    page = render_study_report(study)
    assert "not confirmed: the baseline is what run exported" in page
    assert "the best was not confirmed, so the baseline is exported" in page
    _, base_export = export_best(study, out=None, trial=study.trials[0])
    assert base_export.command in page.replace("&#x27;", "'")


def test_without_confirmation_the_report_says_there_is_no_noise_band(make_study: StudyMaker) -> None:
    page = render_study_report(make_study(CONFIGS))
    assert "was not re-measured against the baseline" in page


def test_a_study_whose_trials_all_failed_gets_a_report_that_says_why(make_study: StudyMaker) -> None:
    study = make_study(CONFIGS[:2], fail_all=True)
    page = render_study_report(study)
    assert "No trial was measured" in page
    assert "Plotly.newPlot(" not in page and "plotly.js v" not in page  # nothing drawn, no library
    headers, rows = _tables(page).tables["trial-table"]
    assert [dict(zip(headers, r, strict=True))["evidence"] for r in rows] == [EVIDENCE] * 3
    assert "Nothing to export: study" in page and "no feasible trial" in page


def test_a_study_with_no_finished_trial_is_a_one_line_error(tmp_path: Path) -> None:
    study = load_or_create(f"sqlite:///{tmp_path / 'e.db'}", "empty", Objective(), seed=0)
    with pytest.raises(
        StorageError, match=r"no finished trial and no night yet.*autotune run --study empty"
    ) as info:
        write_study_report(study, tmp_path / "r.html")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "r.html").exists()


def test_importance_says_why_it_is_not_shown(make_study: StudyMaker) -> None:
    one = render_study_report(
        make_study([{"block_size": 16}, {"block_size": 32}], space=ONE_PARAM, name="one")
    )
    assert "Not shown: the study tuned one parameter (block_size)" in one
    assert 'id="plot-importance"' not in one
    few = render_study_report(make_study(CONFIGS[:1], name="few"))
    assert "importances need at least 2 measured trials with tuned parameters; this study has 1" in few


def test_latency_cdfs_are_the_per_request_timings_of_baseline_and_best(make_study: StudyMaker) -> None:
    facts = collect(make_study(CONFIGS))
    assert facts.baseline is not None and facts.best is not None and facts.best.number == 1
    for row, ttft_s in ((facts.baseline, 0.40), (facts.best, 0.10)):
        cdf = request_cdf(row, "ttft")
        assert not isinstance(cdf, str)
        xs, ys = cdf
        expected = np.sort([t.ttft for t in timings_for(ttft_s)]) * 1000.0
        np.testing.assert_allclose(xs, expected)
        assert ys[0] == pytest.approx(1 / 20) and ys[-1] == 1.0


def test_timings_are_found_in_a_moved_study_and_missing_ones_are_named(
    make_study: StudyMaker, studies_dir: Path, tmp_path: Path
) -> None:
    study = make_study(CONFIGS)
    moved = tmp_path / "moved"
    shutil.move(studies_dir / "s", moved)
    page = render_study_report(study, timings_dir=moved)
    assert 'id="plot-latency"' in page and "per-request timings are gone" not in page
    lost = render_study_report(study)
    assert "per-request timings are gone" in lost and 'id="plot-latency"' not in lost


def test_working_set_is_drawn_against_kv_capacity_when_known(make_study: StudyMaker) -> None:
    study = make_study(CONFIGS)
    workload = {"requests": 48, "prompt_tokens": {"p50": 600, "p90": 640, "max": 700, "total": 30000},
                "working_set_tokens": 2304, "prefix_reuse": 0.83, "block_size": 64}  # fmt: skip
    page = render_study_report(study, workload=workload)
    assert "working set 2,304" in page and "2,304 tokens (distinct prefix blocks)" in page
    assert "working set is not known here" in render_study_report(study)


def test_pareto_front_and_infeasible_marks(make_study: StudyMaker) -> None:
    assert pareto_front([(100, 10), (200, 20), (150, 5), (300, 20), (50, 1)]) == [4, 0, 1]
    fig = pareto_figure(collect(make_study(CONFIGS)))
    assert not isinstance(fig, str)
    traces = {t.name: t for t in fig.data}
    assert list(traces["violates a constraint"].text) == ["#3"]  # the throughput-starved trial
    front = traces["Pareto front"]
    assert list(front.x) == sorted(front.x) and len(front.x) >= 1


def test_cli_writes_the_report_and_an_unknown_study_is_one_line(
    make_study: StudyMaker, studies_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.cli import main

    make_study(CONFIGS)
    studies = studies_dir
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        main(["report", "--study", "s", "--studies-dir", str(studies)])
        with pytest.raises(SystemExit) as info:
            main(["report", "--study", "nope", "--studies-dir", str(studies)])
    finally:  # main() installs process-wide signal handlers
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    out, err = capsys.readouterr()
    assert (studies / "s" / "report.html").is_file()
    assert f"wrote {studies / 's' / 'report.html'}" in out
    assert info.value.code == 2  # an unknown study is bad input (issue 30)
    assert err.strip() == f"error: --study: no study named 'nope' (no {studies / 'nope.db'})"


def test_the_report_never_writes_to_the_study(
    make_study: StudyMaker, studies_dir: Path, tmp_path: Path
) -> None:
    study = make_study(CONFIGS)
    before = [(t.number, t.state, dict(t.user_attrs)) for t in study.get_trials()]
    attrs = dict(study.user_attrs)
    write_study_report(study, tmp_path / "out" / "r.html")
    reloaded = optuna.load_study(study_name="s", storage=f"sqlite:///{studies_dir / 's.db'}")
    assert [(t.number, t.state, dict(t.user_attrs)) for t in reloaded.get_trials()] == before
    assert dict(reloaded.user_attrs) == attrs
    assert (tmp_path / "out" / "r.html").stat().st_size > 1_000_000  # plotly.js is inside
