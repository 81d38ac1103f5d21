"""The ``bench`` and ``compare`` use cases called as functions, without the CLI: a measurement of a
running (fake) server comes back as a typed outcome with the JSON written, and ``compare`` reads two
such records back; neither prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import usecases
from autotune.studyfile import StudySpec, resolve_spec
from tests.e2e.test_cli_bench import _server


def _workload(path: Path, n: int = 6) -> Path:
    path.write_text(
        "".join(
            json.dumps({"prompt": f"question {i} " + "word " * 50, "max_tokens": 4, "timestamp": i * 0.05})
            + "\n"
            for i in range(n)
        )
    )
    return path


def test_bench_then_compare_return_outcomes_and_print_nothing(
    tmp_path: Path, mark: str, capfd: pytest.CaptureFixture[str]
) -> None:
    wl = _workload(tmp_path / "w.jsonl")
    a, b = tmp_path / "a.json", tmp_path / "out" / "b.json"
    with _server(tmp_path, mark) as served:
        first = usecases.bench(StudySpec(workload=wl, slo=("ttft_p90=5s",)), served.base_url, json_out=a)
        second = usecases.bench(StudySpec(workload=wl, rate=50.0), served.base_url, json_out=b)
    assert first.exit_code == 0 and first.failure is None
    assert first.heading.startswith(f"{served.base_url}, model tiny: 6 requests")
    assert first.record.figures is not None and first.record.figures.completed == 6
    assert first.slos_ms == {"ttft_p90": 5000.0}
    assert first.headline is None and first.written == (a,) and second.written == (b,)
    assert json.loads(a.read_text())["bench"]["requests"] == 6

    spec = resolve_spec("compare", flags={"baseline_config": a, "config": b, "json_out": tmp_path / "c.json"})
    said = usecases.Transcript()
    outcome = usecases.compare(spec, said)
    assert outcome.recorded and outcome.exit_code == 0 and outcome.failed == ()
    assert outcome.result.a.name == f"A {a}" and outcome.result.b.name == f"B {b}"
    assert outcome.warnings == (
        "the two measurements differ in arrival: 'file timestamps' vs 'poisson at 50/s'; "
        "the ratio compares unlike runs",
    )
    assert outcome.json_out == tmp_path / "c.json" and outcome.json_out.exists()
    assert said.said == [] and said.shown == []  # nothing re-measured: no run to say
    captured = capfd.readouterr()
    assert "differ in arrival" not in captured.out + captured.err
