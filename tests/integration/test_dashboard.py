"""A study opened in optuna-dashboard (the well-kept browser for Optuna studies): its API serves
every trial with readable flat figures next to the full records."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.bench import RequestTiming, summarize
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    Figures,
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    load_or_create,
    open_storage,
    run_study,
)
from tests.fakes.evaluators import over_words

dashboard = pytest.importorskip("optuna_dashboard", reason="optuna-dashboard is in the test extras")

SPACE = SearchSpace.model_validate(
    {
        "name": "t",
        "platform": "cpu",
        "parameters": {"block_size": {"type": "categorical", "choices": [32, 64], "flag": "--block-size"}},
    }
)


@over_words
def _evaluator(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
    if "32" in rendered.args:
        return TrialRecord(status=TrialStatus.FAILED, failure="out_of_memory", reason="CUDA out of memory")
    t = [RequestTiming(f"r{i}", None, 0.0, 0.0, 0.05, 0.08, (0.01,) * 3, 4, 8) for i in range(4)]
    return TrialRecord(status=TrialStatus.OK, figures=Figures(summarize(t, 1.0).as_dict()))


def _get(app: Any, path: str, query: str = "") -> Any:
    status: dict[str, str] = {}

    def start(code: str, headers: Any, exc_info: Any = None) -> None:
        status["code"] = code

    env = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO(),
        "wsgi.errors": io.StringIO(), "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
    }  # fmt: skip
    body = b"".join(app(env, start))
    assert status["code"].startswith("200"), (status, body[:300])
    return json.loads(body)


def test_the_study_reads_well_in_optuna_dashboard(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = load_or_create(url, "dash", Objective(), seed=0)
    for params in ({"block_size": 64}, {"block_size": 32}):
        study.enqueue_trial(params)
    run_study(study, TrialPolicy(space=SPACE, objective=Objective()), _evaluator, 3)

    app = dashboard.wsgi(open_storage(url))
    (summary,) = _get(app, "/api/studies")["study_summaries"]
    detail = _get(app, f"/api/studies/{summary['study_id']}", "after=0")
    trials = {t["number"]: {a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"]}
    assert len(trials) == 3
    base, good, oom = trials[0], trials[1], trials[2]
    assert base["config"] == "(baseline flags only)" and float(base["ttft_p90_ms"]) == pytest.approx(50.0)
    assert good["config"] == "--block-size 64" and float(good["output_tok_s"]) > 0
    assert oom["why"].startswith("out_of_memory: CUDA out of memory") and "ttft_p90_ms" not in oom
    assert [trials[n]["feasible"] for n in (0, 1, 2)] == ["True", "True", "False"] or [
        trials[n]["feasible"] for n in (0, 1, 2)
    ] == [True, True, False]
    assert json.loads(base["figures"])["percentiles_ms"]["ttft_p90"] == pytest.approx(50.0)
    # Optuna's own shape for a trial without a measurement: no sentinel value on any plot's axis,
    # the state optuna-dashboard and TPE read as "no value", and the constraints it broke.
    by_number = {t["number"]: t for t in detail["trials"]}
    assert [by_number[n]["state"] for n in (0, 1, 2)] == ["Complete", "Complete", "Pruned"]
    assert not by_number[2].get("values") and by_number[2]["constraints"], by_number[2]
    shown = [v for t in detail["trials"] for v in (t.get("values") or [])]
    assert len(shown) == 2 and all(abs(float(v)) < 1e6 for v in shown), shown
