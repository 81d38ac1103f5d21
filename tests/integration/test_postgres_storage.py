"""Many workers on one study through a real PostgreSQL server (started by .ci/run)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from autotune.bench import RequestTiming, summarize
from autotune.space import RenderedConfig, SearchSpace
from autotune.study import (
    Figures,
    Objective,
    TrialPolicy,
    TrialRecord,
    TrialStatus,
    best_feasible,
    load_or_create,
    resolve_storage_url,
    run_study,
)
from tests.fakes.evaluators import over_words

URL = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not URL, reason="AUTOTUNE_TEST_POSTGRES_URL not set (.ci/run starts PostgreSQL)"),
]

SPACE = SearchSpace.model_validate(
    {
        "name": "pg",
        "platform": "cpu",
        "parameters": {
            "block_size": {"type": "categorical", "choices": [32, 64, 128], "flag": "--block-size"}
        },
    }
)


@over_words
def _fake_evaluator(number: int, rendered: RenderedConfig, listener: object = None) -> TrialRecord:
    bs = int(rendered.args[1]) if rendered.args else 128
    ttft = 0.01 + abs(bs - 64) / 10000
    timings = [RequestTiming(f"r{i}", None, 0.0, 0.0, ttft, ttft + 0.01, (0.01,), 2, 10) for i in range(5)]
    return TrialRecord(
        status=TrialStatus.OK, command=("fake",), figures=Figures(summarize(timings, 1.0).as_dict())
    )


def test_two_workers_share_one_study_with_one_baseline() -> None:
    assert URL is not None
    url = resolve_storage_url(URL, "unused", studies_dir=None)  # type: ignore[arg-type]
    name = f"pg-{uuid.uuid4().hex[:8]}"
    obj = Objective(metric="ttft_p90", min_throughput_ratio=0.5)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            study = load_or_create(url, name, obj, seed=seed)
            # as parallel workers do: a baseline another worker is measuring is not enqueued again
            run_study(study, TrialPolicy(space=SPACE, objective=obj, baseline_elsewhere=True), _fake_evaluator, 4)  # fmt: skip
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    study = load_or_create(url, name, obj, seed=3)
    trials = study.get_trials()
    assert len(trials) == 8
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
    assert all(t.user_attrs["status"] == "ok" for t in trials)
    best = best_feasible(study)
    assert best is not None and best.value is not None


def test_password_in_storage_url_is_refused_and_not_echoed() -> None:
    from autotune.errors import StorageError

    with pytest.raises(StorageError) as err:
        resolve_storage_url("postgresql+psycopg://u:hunter2@127.0.0.1/db", "s", studies_dir=None)  # type: ignore[arg-type]
    assert "hunter2" not in str(err.value)
