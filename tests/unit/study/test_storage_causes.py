"""Storage errors say their cause in one line without -v (issue 30, item 5): a read-only database
said "invalid data in the commit, e.g. exceeding max length" (Optuna's guess for any failed commit),
and "attempt to write a readonly database" showed only in the -v traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from sqlalchemy.exc import OperationalError

from autotune.errors import StorageError
from autotune.study import Objective, load_or_create, open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_a_read_only_database_says_read_only_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    load_or_create(f"sqlite:///{db}", "s", Objective(), 0)
    # SQLite's own read-only mode: it refuses writes even to root, who ignores file modes (chmod)
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"

    with pytest.raises(StorageError) as info:
        load_or_create(read_only, "other", Objective(), 0)

    message = str(info.value)
    assert "\n" not in message
    assert "the database is read-only" in message and "attempt to write a readonly database" in message
    assert "fix: make the database file and its directory writable" in message
    assert "invalid data in the commit" not in message
    assert message.startswith(f"storage {read_only}: ")  # as written, not "file%3A"


def test_a_missing_directory_and_a_server_that_is_not_there_are_unreachable(tmp_path: Path) -> None:
    with pytest.raises(
        StorageError, match=r"unable to open database file \(the database is unreachable; fix: "
    ):
        load_or_create(f"sqlite:///{tmp_path}/no-such-dir/s.db", "s", Objective(), 0)
    with pytest.raises(StorageError, match=r"(refused|failed).*the database is unreachable") as info:
        open_storage("postgresql+psycopg://autotune@127.0.0.1:1/nothing", attempts=1)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("driver_error", "cause"),
    [
        ("database or disk is full", "the disk is full"),
        ("database is locked", "the database is locked"),
        ("attempt to write a readonly database", "the database is read-only"),
    ],
)
def test_each_cause_of_a_failed_commit_is_said_in_words(driver_error: str, cause: str) -> None:
    """As Optuna raises it: StorageInternalError from SQLAlchemy's error from the driver's."""
    db_error = OperationalError("COMMIT", {}, sqlite3.OperationalError(driver_error))
    try:
        try:
            raise optuna.exceptions.StorageInternalError(
                "An exception is raised during the commit. This typically happens due to invalid data in "
                "the commit, e.g. exceeding max length. "
            ) from db_error
        except optuna.exceptions.StorageInternalError as exc:
            raise StorageError(f"storage sqlite:///s.db: cannot open study 's': {exc}") from exc
    except StorageError as err:
        message = str(err)

    assert message.startswith(
        f"storage sqlite:///s.db: cannot open study 's': {driver_error} ({cause}; fix: "
    )
    assert "invalid data" not in message and "\n" not in message


def test_a_storage_error_without_a_database_cause_is_unchanged() -> None:
    assert (
        str(StorageError("--study: no study named 'x' (known: none)"))
        == "--study: no study named 'x' (known: none)"
    )
    try:
        raise StorageError("storage x: cannot open: bad") from ValueError("bad")
    except StorageError as err:
        assert str(err) == "storage x: cannot open: bad"
