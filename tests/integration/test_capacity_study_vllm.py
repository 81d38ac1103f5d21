"""A capacity study on the real CPU build (issue 45): a 24-layer tiny model and
``examples/rag.jsonl`` with a starved baseline pool (``--baseline-arg`` 60 MiB: 2,560 KV tokens, the
demo's 20 MiB at 8 layers; half the documents' prefixes evicted), an SLO on the median TTFT. Two
trials (the baseline and the prior's pick, both measured), the best re-measured against the baseline
A B (each run a bracket of 2 load levels: the file's pace, then doubled or halved), the export
header's capacity line with both arms' figures, and no engine left behind: four engine starts. (The
A B A B of several rounds, their ranges and the noise they show, are the confirmation's unit tests';
a sampled third trial, pruned or not, proved nothing here; bisecting a bracket is the fake's,
tests/e2e/test_cli_capacity.py.)

Why 2 levels are enough: the levels double, so the tuned pool holds 1x (6 req/s) or at least 0.5x
where the starved one breaks 0.5x (this host, loaded: 455-2,108 ms) or 1x (a quiet host, its knee
at 3-4 req/s): the best's capacity then lies at or above every load at which the baseline broke.

Why this SLO (benchmarks/RESULTS.md, "Capacity at an SLO on the CPU build"): on 2 cores the engine's
compute caps both pools near the same load at a p90 limit, but under load the starved pool's median
TTFT is a queue of prefills where a larger pool serves the cached documents: at ``ttft_p50 <= 100 ms``
the KV pool is what limits the capacity.

Why 24 layers: with the demo's 8 layers the pools part at 13 and 23.5 req/s, where the replayer shares
2 cores with the engine and, in CI, the other worker's engine: there the tuned pool broke at 18 req/s
and both read 12 req/s (2026-12-05). Three times the compute per token moves the knees down to 3-4 and
10-18 req/s (one core kept busy beside the run, on this AVX-512 host: confirmed 3.38 -> 14.9 req/s).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.tiny_model import make_tiny_model
from tests.conftest import MARK_ENV, REPO

pytestmark = pytest.mark.vllm

_LINE = re.compile(
    r"^# capacity at SLO ttft_p50<=100ms: ([\d.]+) req/s \[([\d.]+)-([\d.]+)\] "
    r"\(baseline ([\d.]+) req/s \[([\d.]+)-([\d.]+)\](?:, ([\d.]+)x|: even its lowest level broke the SLO)\)$"
)


@pytest.mark.timeout(600)  # 4 engine starts, each a bracket (7 took 363 s alone, 558 s in CI)
def test_a_capacity_study_on_real_vllm_exports_a_capacity_above_the_starved_baseline(
    tmp_path: Path, mark: str
) -> None:
    model = make_tiny_model(
        Path(os.environ.get("AUTOTUNE_TEST_MODEL_DIR") or tmp_path / "m") / "l24", layers=24
    )
    out = tmp_path / "best.yaml"
    res = subprocess.run(
        [sys.executable, "-m", "autotune", "run", "--workload", str(REPO / "examples" / "rag.jsonl"),
         "--model", str(model), "--engine-arg=--enforce-eager", "--engine-arg=--max-model-len=2048",
         "--baseline-arg=--kv-cache-memory-bytes=60M", "--objective", "capacity", "--slo", "ttft_p50=100ms",
         "--speed", "2", "--capacity-levels", "2", "--capacity-min-level", "0s",
         "--n-trials", "2", "--confirm-rounds", "1",
         "--study", "cap", "--studies-dir", str(tmp_path / "studies"), "--out", str(out)],
        env={**os.environ, MARK_ENV: mark, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-4000:]
    st = optuna.load_study(study_name="cap", storage=f"sqlite:///{tmp_path / 'studies' / 'cap.db'}")
    measured = [t for t in st.get_trials() if (t.user_attrs.get("figures") or {}).get("capacity_levels")]
    assert len(st.get_trials()) == 2 and len(measured) == 2, [
        t.user_attrs.get("reason") for t in st.get_trials()
    ]
    assert "re-measured trial" in res.stderr and ": confirmed (capacity: median" in res.stderr, res.stderr[
        -3000:
    ]
    header = out.read_text()
    line = next((ln for ln in header.splitlines() if ln.startswith("# capacity at SLO")), "")
    m = _LINE.match(line)
    assert m, header
    best, lo, _hi, base, _blo, bhi = (float(g) for g in m.groups()[:6])
    # the best's run above the baseline's; a baseline whose lowest level broke carries 0 (a slower host)
    ratio = float(m.group(7)) if m.group(7) else None
    assert (
        lo > bhi and best > base and ((ratio is None and base == 0) or (ratio is not None and ratio > 1.0))
    ), line
    assert "kv-cache-memory-bytes: 60M" not in header  # not the starved baseline's pool
