"""benchmarks/predict_grid.py's dry run (no engine: a simulated one of known cost) goes through the
whole benchmark, writes its JSON and a calibration that ``autotune predict`` reads. The real run
starts vLLM 12 times: the lead runs it (benchmarks/RESULTS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_dry_run_reports_the_done_when_and_saves_a_calibration(tmp_path: Path) -> None:
    out = tmp_path / "pg.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "predict_grid.py"), "--dry-run", "--json-out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())

    assert r["dry_run"] is True and len(r["rows"]) == 12 and len(r["from_baseline"]) == 12
    assert r["rows"][0]["predicted"] is None  # the baseline: nothing fitted before it
    assert all(row["predicted"] is not None and row["measured"] for row in r["rows"][1:])
    v = r["verdict"]
    assert v["from_baseline"]["of"] == 12 and v["as_it_goes"]["predictions"] == 11
    # a fake engine of known cost, 5% noise: the model that found those costs predicts within 20%
    assert v["from_baseline"]["within_20"] >= 9
    assert set(v["done_when"]) == {
        "within_20_at_least_9_of_12_from_baseline", "best_in_top3_from_baseline", "coverage_at_least_80pct",
    }  # fmt: skip
    assert "DRY RUN" in proc.stdout and "ledger: 11 predictions" in proc.stdout

    cal = Path(r["calibration"])
    pred = subprocess.run(
        [sys.executable, "-m", "autotune", "predict", "--workload", str(REPO / "examples" / "rag.jsonl"),
         "--model", "tiny-l8", "--calibration", str(cal), "--config", "kv_cache_memory_bytes=128"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert pred.returncode == 0, pred.stderr[-2000:]
    assert "PREDICTED, not measured" in pred.stdout and "11 measured errors" in pred.stdout
