"""A study that only ran nights has a report, and `nightly history` lines: the plan, the runs,
the candidates and the decision, with the counts the study holds (no vLLM, no server)."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.nightly import NightRecord, history_table, save_night
from autotune.report import render_study_report


def _night(number: int, **extra: object) -> NightRecord:
    base: dict[str, object] = {
        "number": number,
        "date": f"2026-12-0{number}T02:00:00+00:00",
        "fingerprints": {},
        "changes": [],
        "metric": "ttft_p90",
        "baseline_figure": {"median": 410.0, "low": 400.0, "high": 420.0, "runs": [400.0, 420.0]},
        "incumbent_label": "incumbent (baseline)",
        "incumbent_args": [],
        "incumbent_env": {},
        "incumbent_params": {},
        "incumbent_figure": {"median": 410.0, "low": 400.0, "high": 420.0, "runs": [400.0, 420.0]},
        "noise_band": None,
        "band_source": "one run of one pass and no earlier night: the minimum gain stands in",
        "regression": False,
        "regression_reason": "first night: nothing to compare with",
        "decision": "kept",
        "reason": "no candidate ran: --max-trials 0 turned the search off",
        "promoted_trial": None,
        "trials": 1,
        "plan": {"lines": ["plan: 12.0 min at 1.5 min an engine run (median of 4 measured run(s))"]},
        "runs": [
            {
                "phase": "re-measurement",
                "arm": "incumbent (baseline)",
                "round": 1,
                "status": "ok",
                "value": 410.0,
            }
        ],
        "candidates": [
            {"number": 0, "params": {}, "status": "ok", "value": 410.0, "feasible": True, "baseline": True}
        ],
    }
    base.update(extra)
    return NightRecord.from_dict(base)


def _study(tmp_path: Path) -> optuna.Study:
    (tmp_path / "studies").mkdir()
    url = f"sqlite:///{tmp_path / 'studies' / 'prod.db'}"
    return optuna.create_study(study_name="prod", storage=url)


def test_a_study_with_only_nights_reports_the_night_and_the_nights(tmp_path: Path) -> None:
    st = _study(tmp_path)
    save_night(st, _night(1))
    save_night(st, _night(2, reason="every candidate was worse", trials=4))
    page = render_study_report(st, night=1)
    night_part = page[page.index("Night 1") : page.index('id="nights"')]
    assert "plan: 12.0 min at 1.5 min an engine run" in night_part
    assert "re-measurement" in night_part and "(baseline)" in night_part
    assert "no candidate ran: --max-trials 0 turned the search off" in night_part
    assert "noise band unknown" in night_part
    assert "every candidate was worse" in page[page.index('id="nights"') :]  # the table of all nights


def test_history_is_a_table_with_units_and_never_prints_an_unmeasured_band_as_zero(tmp_path: Path) -> None:
    st = _study(tmp_path)
    save_night(st, _night(1))
    table = history_table("prod", None, tmp_path / "studies")
    assert table.title == "nights of study prod (ttft_p90)"
    assert table.columns[:4] == ("night", "date", "incumbent", "figure")
    ((number, date, label, figure, band, regression, *_rest, trials, _time, _why),) = table.rows
    assert (number, date, label) == ("1", "2026-12-01T02:00", "incumbent (baseline)")
    assert figure == "410.0 ms [400.0 ms-420.0 ms]" and band.startswith("unknown") and regression == "no"
    assert trials == "1 trial(s) tonight" and not any("0.0%" in cell for cell in table.rows[0])


def test_figures_carry_units_and_no_exponent() -> None:
    from autotune.report import figure_text

    assert figure_text(200300.0, "ttft_p90") == "200.3 s"
    assert figure_text(63.44, "tpot_p50") == "63.4 ms"
    assert figure_text(1234.5, "output_throughput") == "1234.5 tok/s"
