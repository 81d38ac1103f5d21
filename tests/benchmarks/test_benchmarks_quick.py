"""Each benchmark's ``--quick`` mode runs (fake server, tiny sizes) and writes sane JSON, so the
scripts in benchmarks/ cannot rot. The figures themselves are recorded in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(name: str, tmp_path: Path, *extra: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / f"{name}.py"),
            "--quick",
            "--json-out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.lstrip().startswith("### "), proc.stdout[:500]  # the markdown snippet
    return json.loads(out.read_text()), proc.stdout


def _check_env(result: dict[str, Any]) -> None:
    env = result["env"]
    assert env["commit"] and env["date"] and "python" in env["command"]
    assert env["machine"]["logical_cpus"] >= 1 and env["machine"]["ram_gib"] > 0
    assert env["engine"]


def _load(load: dict[str, list[float]]) -> None:
    assert len(load["start"]) == 3 and len(load["end"]) == 3


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


@pytest.mark.timeout(150)
def test_gain_quick_measures_defaults_and_tuned_alternately(tmp_path: Path) -> None:
    r, md = _run("gain", tmp_path)
    _check_env(r)
    assert [Path(w["workload"]).name for w in r["workloads"]] == ["rag.jsonl", "support_chat.jsonl"]
    for w in r["workloads"]:
        _load(w["load_average"])
        assert w["study"]["n_trials"] == r["trials"] == 3
        assert w["study"]["trials"][0]["baseline"] is True
        for side in ("defaults", "tuned"):
            a = w["alternating"][side]
            assert a["runs_ok"] == a["runs"] == r["rounds"] == 2
            assert 0 < a["ttft_p50"]["min"] <= a["ttft_p50"]["max"]
            assert a["ttft_p50"]["mean"] <= a["ttft_p90"]["mean"] * 1.001
            assert _positive(a["output_throughput"]["mean"]) and a["failed"]["max"] == 0
            assert 0 <= a["goodput"]["mean"] <= a["output_throughput"]["mean"]
        for name in ("ttft_p50", "ttft_p90", "output_throughput", "goodput"):
            assert _positive(w["ratio_tuned_vs_defaults"][name])
        assert isinstance(w["never_worse_than_defaults"], bool)
    assert "defaults (A)" in md and "tuned (B)" in md


@pytest.mark.timeout(150)
def test_search_efficiency_quick_measures_a_grid_and_replays_samplers(tmp_path: Path) -> None:
    r, md = _run("search_efficiency", tmp_path, "--seeds", "3")
    _check_env(r)
    grid = r["grid"]
    _load(grid["load_average"])
    assert len(grid["configs"]) == 8 and grid["baseline"] in grid["configs"]
    for entry in grid["configs"].values():
        assert entry["status"] == "ok" and len(entry["repeats"]) == 2
        assert entry["ttft_p90"]["n"] == 2 and _positive(entry["ttft_p90"]["mean"])
    sim = r["simulation"]
    assert sim["budget"] == 8 and sim["seeds"] == 3
    # Every study measures the baseline first, as `autotune run` does (the grid's enqueued points
    # after it): after one trial, the configuration the tool would export is the baseline.
    baseline_regret = sim["baseline_ttft_p90_ms"] / sim["optimum"]["ttft_p90_ms"] - 1
    for name in ("tpe", "random", "grid"):
        s = sim["samplers"][name]
        assert len(s["trials_to_within"]) == 3
        assert all(t is None or 1 <= t <= 8 for t in s["trials_to_within"])
        assert len(s["median_regret_by_budget"]) == 8
        assert s["median_regret_by_budget"][0] == pytest.approx(baseline_regret)
        assert all(x is None or x >= 0 for x in s["median_regret_by_budget"])
    # The grid visits every configuration within the budget; the optimum is among them.
    assert sim["samplers"]["grid"]["share_reached"] > 0
    assert "median trials to within 5%" in md


@pytest.mark.timeout(150)
def test_fidelity_quick_compares_ttft_times_the_replayer_and_the_overhead(tmp_path: Path) -> None:
    r, md = _run("fidelity", tmp_path, "--rates", "100,500", "--stub-seconds", "0.4")
    _check_env(r)
    _load(r["load_average"])
    a = r["a"]
    assert a["client"]["count"] == a["requests"] > 0 and a["failed"] == 0
    assert _positive(a["client"]["mean_ms"]) and _positive(a["server"]["mean_ms"])
    b = r["b"]
    assert set(b["rates"]) == {"100", "500"}
    for rate, v in b["rates"].items():
        assert v["requests"] == int(float(rate) * 0.4) and v["ok"] == v["requests"]
        assert -5.0 < v["lag_ms"]["p50"] <= v["lag_ms"]["p99"] <= v["lag_ms"]["max"]
        assert 0.0 <= v["on_time_share"] <= 1.0
    c = r["c"]
    assert [t["status"] for t in c["trials"]] == ["ok", "ok", "ok"]
    for t in c["trials"]:
        assert {"startup", "warmup", "measure", "teardown"} <= set(t["timings_s"])
        assert 0 < t["measure_share"] < 1
    assert 20 < c["peak_rss_mib"] < 4096
    assert "(b) replayer" in md


@pytest.mark.timeout(120)
def test_repeatability_quick_reports_the_cv_of_the_objective(tmp_path: Path) -> None:
    r, md = _run("repeatability", tmp_path)
    _check_env(r)
    _load(r["load_average"])
    assert [x["status"] for x in r["runs"]] == ["ok"] * 3
    s = r["stats"]["ttft_p90"]
    assert s["n"] == 3 and s["min"] <= s["mean"] <= s["max"]
    assert r["cv_ttft_p90"] >= 0 and isinstance(r["meets_target"], bool)
    assert r["length_factor_for_target"] >= 1
    assert "CV of TTFT p90" in md


@pytest.mark.timeout(120)
def test_replay_scale_quick_replays_one_timestamp_and_cancels_cleanly(tmp_path: Path) -> None:
    r, md = _run("replay_scale", tmp_path)
    _check_env(r)
    _load(r["load_average"])
    f = r["full"]
    assert f["requests"] == f["completed"] == 2000 and f["failed"] == 0 and f["failures"] == {}
    assert f["peak_in_flight"] == f["max_in_flight"] == 1024
    assert _positive(f["sent_per_s"]) and _positive(f["peak_rss_mib"]) and _positive(f["cpu_us_per_request"])
    assert 0 <= f["lag_ms"]["p50"] <= f["lag_ms"]["p99"] <= f["lag_ms"]["max"]
    assert f["behind_schedule"] is True  # 2,000 requests due at once, 1,024 at a time
    k = r["cancel"]
    assert k["tasks_left"] == 0 and 0 <= k["return_s"] < 5
    assert "Replayer at scale" in md


@pytest.mark.timeout(240)
def test_exhaustive_measures_every_grid_point_once_and_a_rerun_adds_none(tmp_path: Path) -> None:
    """benchmarks/exhaustive.py against the fake server: a 2 x 2 space, its 4 configurations and the
    baseline, each measured once; running it again resumes and enqueues nothing."""
    space = tmp_path / "space.yaml"
    space.write_text(
        "name: g\nplatform: cpu\nparameters:\n"
        "  kv_cache_memory_bytes: {type: categorical, choices: [20, 40], format: '{}M', flag: --kv-cache-memory-bytes}\n"
        "  block_size: {type: categorical, choices: [64, 128], flag: --block-size}\n"
    )
    wl = tmp_path / "wl.jsonl"
    wl.write_text(
        "".join(json.dumps({"prompt": f"doc words here q{i}", "max_tokens": 2}) + "\n" for i in range(4))
    )
    cmd = [
        sys.executable, str(REPO / "benchmarks" / "exhaustive.py"), "--fake", "--space", str(space),
        "--workload", str(wl), "--studies-dir", str(tmp_path / "s"), "--study", "g", "--json-out",
        str(tmp_path / "g.json"),
    ]  # fmt: skip
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=200)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "grid of 4 configurations; 4 enqueued now, 5 to run" in first.stdout
    rows = json.loads((tmp_path / "g.json").read_text())["rows"]
    assert len(rows) == 5 and all(r["status"] == "ok" and _positive(r["ttft_p90"]) for r in rows)
    assert sorted(str(r["params"]) for r in rows if "block_size" in r["params"]) == sorted(
        str({"kv_cache_memory_bytes": k, "block_size": b}) for k in (20, 40) for b in (64, 128)
    )
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=200)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "grid of 4 configurations; 0 enqueued now, 0 to run" in again.stdout


RECORDED_SERIES = REPO / "benchmarks" / "results" / "issue14" / "repeat_like_0213.json"


def _learning_report(data: dict[str, Any], tmp_path: Path, name: str) -> tuple[dict[str, Any], str]:
    """``search_learning.py report`` on ``data`` (a repeat series; no engine): its JSON and markdown."""
    src, out = tmp_path / f"{name}.json", tmp_path / f"{name}.report.json"
    src.write_text(json.dumps(data))
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "search_learning.py"), "report", str(src), "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_search_learning_report_sets_each_restart_beside_the_machines_own_speed(tmp_path: Path) -> None:
    """``search_learning.py report`` on a recorded repeat series (no engine): with the machine's
    speed timed before each restart it gives the machine's CV and its correlation with the trial
    figure; a series recorded before the probe existed reports as it did."""
    recorded = json.loads(RECORDED_SERIES.read_text())
    assert "machine_ms" not in recorded["runs"][0]
    probed = json.loads(json.dumps(recorded))
    for run in probed["runs"]:  # a machine whose slowness the trial figures follow exactly
        run["machine_ms"] = run["ttft_p90"] / 10.0
    outs = []
    for name, data in (("old", recorded), ("probed", probed)):
        report, md = _learning_report(data, tmp_path, name)
        outs.append((report["repeat"][0], md))
    (old, old_md), (new, new_md) = outs
    assert "machine_ms" not in old and "machine speed" not in old_md
    trial = [r["ttft_p90"] for r in recorded["runs"]]
    assert new["machine_ms"] == [t / 10.0 for t in trial]
    assert new["cv_machine"] == pytest.approx(new["cv_trial"])
    assert new["trial_vs_machine_r"] == pytest.approx(1.0)
    assert "correlation with the trial figure r = +1.00" in new_md


def test_search_learning_report_pairs_an_alternated_variable_with_its_neighbour(tmp_path: Path) -> None:
    """``repeat --alternate-env``: the report sets each restart with the variable beside the one
    just before it, and gives each arm its own CV table."""
    data = json.loads(RECORDED_SERIES.read_text())
    for i, run in enumerate(data["runs"]):
        run["env_arm"] = "X=1" if i % 2 else ""
    report, md = _learning_report(data, tmp_path, "ab")
    p90 = [r["ttft_p90"] for r in data["runs"]]
    want = [round((b - a) / a, 3) for a, b in zip(p90[::2], p90[1::2], strict=True)]
    assert report["env_pairs"]["with_vs_without"] == want and report["env_pairs"]["env"] == "X=1"
    assert [t["env_arm"] for t in report["repeat"]] == ["(unset)", "X=1"]
    assert [t["restarts"] for t in report["repeat"]] == [3, 3]
    assert "with X=1 against without, restart by restart (3 pairs)" in md
