from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.errors import StorageError
from autotune.study import (
    BASELINE_ATTR,
    STORAGE_ENV,
    Objective,
    ensure_baseline,
    load_or_create,
    open_storage,
    redact_url,
    resolve_storage_url,
)


@pytest.fixture(autouse=True)
def _no_storage_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE_ENV, raising=False)


def test_default_is_a_sqlite_file_per_study_under_the_studies_dir(tmp_path: Path) -> None:
    studies = tmp_path / "studies"
    url = resolve_storage_url(None, "my-study", studies)
    assert url == f"sqlite:///{(studies / 'my-study.db').resolve()}"
    assert studies.is_dir()
    # and it is a storage Optuna can use
    optuna.create_study(storage=open_storage(url), study_name="my-study")
    assert (studies / "my-study.db").is_file()


def test_environment_variable_is_used_when_no_storage_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORAGE_ENV, "postgresql+psycopg://tuner:pw@db.internal/studies")
    assert resolve_storage_url(None, "s", tmp_path) == "postgresql+psycopg://tuner:pw@db.internal/studies"
    # an explicit --storage wins over the environment
    assert resolve_storage_url("sqlite:///x.db", "s", tmp_path) == "sqlite:///x.db"


def test_storage_url_with_a_password_is_refused_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as info:
        resolve_storage_url("postgresql+psycopg://tuner:hunter2@db.internal/studies", "s", tmp_path)
    message = str(info.value)
    assert "hunter2" not in message
    assert STORAGE_ENV in message


def test_storage_url_with_a_password_query_parameter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        resolve_storage_url("postgresql+psycopg://tuner@db.internal/studies?password=hunter2", "s", tmp_path)


def test_storage_url_without_a_password_is_accepted(tmp_path: Path) -> None:
    url = "postgresql+psycopg://tuner@db.internal/studies"
    assert resolve_storage_url(url, "s", tmp_path) == url


def test_unparseable_storage_url_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="not a SQLAlchemy URL"):
        resolve_storage_url("not a url", "s", tmp_path)


def test_redact_url_hides_the_password() -> None:
    redacted = redact_url("postgresql+psycopg://tuner:hunter2@db.internal:5432/studies")
    assert "hunter2" not in redacted
    assert "tuner" in redacted and "db.internal" in redacted
    assert redact_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert "hunter2" not in redact_url("::hunter2::")


def test_open_storage_failure_is_a_storage_error_without_the_password() -> None:
    with pytest.raises(StorageError) as info:
        open_storage("nosuchdriver://tuner:hunter2@host/db")
    assert "hunter2" not in str(info.value)


def test_a_worker_that_loads_a_study_before_its_creator_enqueued_the_baseline_adds_none(
    tmp_path: Path,
) -> None:
    """Creating a study and enqueuing its baseline are two steps; in CI a second PostgreSQL worker
    loaded the study between them, enqueued a baseline of its own, and both were measured."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    created = optuna.create_study(storage=url, study_name="s")  # the creator, one step in

    def creator_enqueues() -> None:
        created.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})

    later = threading.Timer(0.3, creator_enqueues)
    later.start()
    try:
        study = load_or_create(url, "s", Objective(metric="ttft_p90"), seed=0)
        ensure_baseline(study, running_counts=True)
    finally:
        later.join()
    baselines = [t for t in study.get_trials() if t.user_attrs.get(BASELINE_ATTR)]
    assert len(baselines) == 1


def test_a_baseline_that_finishes_while_the_worker_looks_is_not_enqueued_again() -> None:
    """Another worker's baseline, RUNNING when the study is first read, finishes before a second
    read: deciding from two reads saw it in neither state and enqueued a second baseline (two
    PostgreSQL workers in CI, 2 baselines measured)."""
    study = optuna.create_study()
    study.enqueue_trial({}, user_attrs={BASELINE_ATTR: True})
    running = study.ask()  # the other worker's baseline, being measured
    assert running.user_attrs.get(BASELINE_ATTR)
    reads = 0
    read_trials = study.get_trials

    def get_trials(*args: Any, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        nonlocal reads
        trials = read_trials(*args, **kwargs)
        reads += 1
        if reads == 1:  # it finishes, measured, right after this read
            running.set_user_attr("status", "ok")
            study.tell(running, 0.1)
        return trials

    study.get_trials = get_trials  # type: ignore[method-assign]
    assert ensure_baseline(study, running_counts=True) is False
    assert sum(bool(t.user_attrs.get(BASELINE_ATTR)) for t in read_trials()) == 1
