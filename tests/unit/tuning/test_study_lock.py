"""The study lock is keyed by the storage and the study: two runs of one study on one storage never
measure at once, whatever their studies folders (issue 30, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import StudyBusyError
from autotune.tuning import StudyLock

PG_URL = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")


def test_two_studies_dirs_on_one_sqlite_file_share_the_lock(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'one.db'}"
    with StudyLock(db, "s", tmp_path / "dir-a"):
        with pytest.raises(StudyBusyError, match=r"study 's' is already running on sqlite:///.*one.db"):
            StudyLock(db, "s", tmp_path / "dir-b").acquire()
        StudyLock(db, "other", tmp_path / "dir-b").acquire()  # another study of that file: free
    with StudyLock(db, "s", tmp_path / "dir-b"):  # released: the next run takes it
        assert (tmp_path / "one.db.s.lock").read_text() == str(os.getpid())  # beside the database
    assert not (tmp_path / "one.db.s.lock").exists()  # removed as it was released: nothing left after a run


def test_a_contender_that_opened_the_file_before_its_removal_locks_a_new_one(tmp_path: Path) -> None:
    import fcntl

    first = StudyLock(None, "s", tmp_path)
    first.acquire()
    assert first.path is not None
    stale = os.open(first.path, os.O_RDWR)  # opened, not yet locked, as the holder releases
    first.release()
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the unlinked file: no lock on the study
    try:
        with StudyLock(None, "s", tmp_path), pytest.raises(StudyBusyError):
            StudyLock(None, "s", tmp_path).acquire()  # the new file is the one that counts
    finally:
        os.close(stale)


def test_the_default_sqlite_file_of_a_studies_dir_locks_as_before(tmp_path: Path) -> None:
    with StudyLock(None, "s", tmp_path), pytest.raises(StudyBusyError):
        StudyLock(None, "s", tmp_path).acquire()


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'one.db'}"
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom autotune.tuning import StudyLock\n"
        f"StudyLock({db!r}, 's', Path({str(tmp_path)!r})).acquire()\nprint('held', flush=True)\ntime.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StudyBusyError, match=f"pid {holder.pid}"):
            StudyLock(db, "s", tmp_path / "elsewhere").acquire()
    finally:
        holder.kill()
        holder.wait()
    with StudyLock(db, "s", tmp_path / "elsewhere"):
        pass


@pytest.mark.skipif(not PG_URL, reason="AUTOTUNE_TEST_POSTGRES_URL not set (.ci/run starts PostgreSQL)")
def test_postgresql_runs_of_one_study_are_serialized_by_an_advisory_lock(tmp_path: Path) -> None:
    assert PG_URL is not None
    with StudyLock(PG_URL, "lock-test", tmp_path / "a") as lock:
        assert lock.path is None and lock.held  # no file: the server holds it
        with pytest.raises(StudyBusyError, match="advisory lock"):
            StudyLock(PG_URL, "lock-test", tmp_path / "b").acquire()
    with StudyLock(PG_URL, "lock-test", tmp_path / "b"):
        pass
