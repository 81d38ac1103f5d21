"""The study report in a real headless browser (Debian's chromium, driven by playwright): no
console error, every plot drawn, the table sorts, and the page renders with the network off.

One test renders the report of a real CPU-vLLM study built through the CLI: the run and the real
night of ``real_nights`` (tests/conftest.py), shared with the nightly tests (``vllm`` mark)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MARK_ENV, REPO, RealNights

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)


@dataclass
class Opened:
    """A page as the browser showed it."""

    page: Any
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    external: list[str] = field(default_factory=list)  # requests to anything but the file itself


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A fresh chromium profile per test; playwright's own browser downloads are never used."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def _open(context: Any, report: Path, *, offline: bool) -> Opened:
    page = context.new_page()
    opened = Opened(page)
    page.on("console", lambda m: opened.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))

    def route(r: Any) -> None:
        url = r.request.url
        if url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            opened.external.append(url)
            r.abort()

    if offline:
        context.set_offline(True)
        page.route("**/*", route)
    page.goto(report.as_uri(), wait_until="load")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=30_000)
    return opened


def _plots(page: Any) -> dict[str, int]:
    """Each plot div of the page and how many drawn SVG layers it has."""
    counts: dict[str, int] = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('div.plot > div > div[id^="plot-"]')]
                .map(d => [d.id, d.querySelectorAll('svg.main-svg').length]))"""
    )
    return counts


def _column(page: Any, header: str) -> list[str]:
    return list(
        page.evaluate(
            """(header) => {
                const t = document.getElementById('trial-table');
                const i = [...t.tHead.rows[0].cells].findIndex(c => c.textContent.trim() === header);
                return [...t.tBodies[0].rows].map(r => r.cells[i].textContent.trim());
            }""",
            header,
        )
    )


def _fake_study_report(tmp_path: Path) -> Path:
    """A report of a study measured by the unit tests' in-process evaluator (every plot present)."""
    from autotune.report import write_study_report
    from autotune.study import Objective, TrialPolicy, load_or_create, run_study
    from tests.unit.report.conftest import CONFIGS, SPACE, FakeEvaluator

    studies = tmp_path / "studies"
    (studies / "s").mkdir(parents=True)
    objective = Objective(min_throughput_ratio=0.9)
    study = load_or_create(f"sqlite:///{studies / 's.db'}", "s", objective, seed=0)
    evaluator = FakeEvaluator(studies / "s")
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, 1)
    for params in CONFIGS:
        study.enqueue_trial(params)
    run_study(study, TrialPolicy(space=SPACE, objective=objective), evaluator, len(CONFIGS))
    return write_study_report(study, tmp_path / "report.html")


def test_report_renders_without_console_errors_and_every_plot_is_drawn(browser: Any, tmp_path: Path) -> None:
    opened = _open(browser, _fake_study_report(tmp_path), offline=False)
    plots = _plots(opened.page)
    assert set(plots) == {"plot-objective", "plot-pareto", "plot-importance", "plot-latency", "plot-memory"}
    assert all(n >= 1 for n in plots.values()), plots
    assert opened.errors == []


def test_clicking_a_header_sorts_the_trial_table_by_value(browser: Any, tmp_path: Path) -> None:
    page = _open(browser, _fake_study_report(tmp_path), offline=False).page
    page.click("#trial-table thead th:text-is('ttft_p90')")
    shown = _column(page, "ttft_p90")
    measured = [float(v) for v in shown if v != "-"]
    assert measured == sorted(measured) and len(measured) >= 5
    assert shown[len(measured) :] == ["-"] * (len(shown) - len(measured))  # unmeasured last
    page.click("#trial-table thead th:text-is('ttft_p90')")
    again = [float(v) for v in _column(page, "ttft_p90") if v != "-"]
    assert again == sorted(measured, reverse=True)


def test_report_renders_with_the_network_off(browser: Any, tmp_path: Path) -> None:
    """Offline, with every request that is not the file itself aborted: nothing was even asked
    for, and every plot is still drawn."""
    opened = _open(browser, _fake_study_report(tmp_path), offline=True)
    plots = _plots(opened.page)
    assert len(plots) == 5 and all(n >= 1 for n in plots.values()), plots
    assert opened.external == []
    assert opened.errors == []


def test_a_group_studys_report_draws_the_split_and_each_model_offline(browser: Any, tmp_path: Path) -> None:
    """A group study's page (tests/unit/report/group_study.py): the split over trials and one plot
    per model, drawn with the network off; sorting the group table by its objective puts the
    failed and infeasible trials last."""
    from autotune.report import write_group_report
    from tests.unit.report.group_study import make_group_study

    report = write_group_report(make_group_study(tmp_path / "g"), tmp_path / "g.html")
    opened = _open(browser, report, offline=True)
    plots = _plots(opened.page)
    assert set(plots) == {"plot-split", "plot-model-rag", "plot-model-chat"}, plots
    assert all(n >= 1 for n in plots.values()), plots
    assert opened.external == [] and opened.errors == []
    # the split's bars: one trace per model, one bar per group trial
    bars = opened.page.evaluate("() => document.querySelectorAll('#plot-split .barlayer .point').length")
    assert bars == 2 * 4, bars
    opened.page.click("#group-table thead th:text-is('group objective')")
    values = opened.page.evaluate(
        """() => [...document.querySelectorAll('#group-table tbody tr')].map(r => r.cells[5].textContent)"""
    )
    measured = [float(v) for v in values if v != "-"]
    assert measured == sorted(measured) and values[len(measured) :] == ["-", "-"], values


def _cli(args: list[str], mark: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.vllm
def test_report_of_a_real_cpu_vllm_study_renders_offline(
    browser: Any, tmp_path: Path, real_nights: RealNights, mark: str
) -> None:
    """`autotune report` of the study the real run and night built (tests/conftest.py; no vLLM start of
    its own): every plot drawn offline from real measurements, per-request timings read back."""
    report = tmp_path / "rag.html"
    made = _cli(
        ["report", "--study", "rag", "--studies-dir", str(real_nights.studies), "-o", str(report),
         "--workload", str(REPO / "examples" / "rag.jsonl")],
        mark, tmp_path, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    assert made.stdout.strip() == f"wrote {report}"

    opened = _open(browser, report, offline=True)
    plots = _plots(opened.page)
    # the nights tuned one parameter: importance cannot rank it, so the page says why it is absent
    assert {"plot-objective", "plot-pareto", "plot-latency", "plot-memory"} <= set(plots), plots
    assert all(n >= 1 for n in plots.values()), plots
    assert opened.external == [] and opened.errors == []
    assert "the study tuned one parameter" in opened.page.inner_text("#importance")
    # the per-request TTFT and TPOT of the trials were read from their .npz and drawn: one step
    # line per request count, not an empty trace
    steps = opened.page.evaluate(
        """() => [...document.querySelectorAll('#plot-latency .scatterlayer path.js-line')]
                .map(p => (p.getAttribute('d') || '').split(/[HVL]/).length - 1)"""
    )
    assert len(steps) >= 2 and min(steps) >= 40, steps  # the RAG example has 48 requests
    status = _column(opened.page, "status")
    # "ok", or "ok; saturated": whether a stall of this 2-core host queued a replay is not the page's
    assert status[0] == "ok (baseline)" and status[1].startswith("ok") and len(status) >= 2, status
