"""Opening a study that exists, for the commands that read one (``show``, ``export``, ``report``)."""

from __future__ import annotations

from pathlib import Path

import optuna

from autotune.errors import StudyNotFoundError

__all__ = ["existing_study"]


def existing_study(storage: str | None, name: str, studies_dir: Path) -> optuna.Study:
    """Open a study that exists, read-only in intent: nothing is created or written."""
    from autotune.study import open_storage, resolve_storage_url

    url = resolve_storage_url(storage, name, studies_dir)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise StudyNotFoundError(f"--study: no study named {name!r} (no {url.removeprefix('sqlite:///')})")
    st = open_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(st)]
    if name not in names:
        raise StudyNotFoundError(f"--study: no study named {name!r} (known: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=name, storage=st)
