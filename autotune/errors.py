"""The one error tree of vllm-autotune.

::

    AutotuneError                  anything the tool reports as a short message and a non-zero exit
    ├── ConfigError                a user-written file or option is invalid (search space, SLO, flag)
    │   └── SearchSpaceError       a search-space YAML is invalid
    ├── WorkloadError              a workload file is invalid (names file, line and field)
    ├── EngineError                the inference engine could not be used
    │   ├── EngineStartError       vLLM exited or timed out before it was healthy (has a failure class)
    │   ├── EngineCrashed          vLLM died after it was healthy (mid-run)
    │   ├── EngineArgsError        the rendered command is rejected by vLLM's own argument parser
    │   └── ServerRefused          a running server (``bench --url``) is unreachable or refuses to be
    │                              measured (401, no such model): bad input, exit 2
    ├── StorageError               the study storage could not be opened or used
    │   └── StudyNotFoundError     --study names no study of the storage (bad input, exit 2)
    ├── StudyBusyError             the study is already being run on this host (exit 6)
    ├── ExportError                no trial to export, or the export could not be written
    └── PromoteHookError           the ``--on-promote`` command failed or timed out (exit: the
                                   hook's own code, 128+N when signal N ended it); the export is kept

Exit codes: 0 done, 1 other error, 2 bad input or usage, 5 no baseline could be measured
(``run``), 6 the study is already running on this host, 130 interrupted. ``autotune nightly``
adds 3 (a regression), 4 (nothing feasible) and, when the promotion was exported but its
``--on-promote`` hook failed, the hook's own exit code (128+N when signal N ended it, as a shell
says; its one-line message names the hook's log).

Expected trial outcomes (out of memory, a bad flag combination, a start-up timeout) are
converted into data by the study loop: the trial is recorded as failed or infeasible with
its reason. Programming errors are not caught.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BUDGET",
    "EXIT_NOTHING_FEASIBLE",
    "EXIT_NO_BASELINE",
    "EXIT_REGRESSION",
    "AutotuneError",
    "ConfigError",
    "EngineArgsError",
    "EngineCrashed",
    "EngineError",
    "EngineStartError",
    "ExportError",
    "PromoteHookError",
    "SearchSpaceError",
    "ServerRefused",
    "StorageError",
    "StudyBusyError",
    "StudyNotFoundError",
    "WorkloadError",
]


EXIT_REGRESSION = 3
EXIT_NOTHING_FEASIBLE = 4
EXIT_NO_BASELINE = 5
EXIT_BUDGET = 8  # a night whose budget could not hold one candidate


class AutotuneError(Exception):
    """Base of every error the CLI turns into a one-line message and a non-zero exit."""

    exit_code: int = 1


class ConfigError(AutotuneError):
    exit_code = 2


class SearchSpaceError(ConfigError):
    pass


class WorkloadError(AutotuneError):
    exit_code = 2


class EngineError(AutotuneError):
    pass


class _EngineFailure(EngineError):
    """``failure`` is a short class name (FailureClass value), ``log_tail`` the log's last lines."""

    def __init__(self, message: str, *, failure: str = "crash", log_tail: str = "", log_path: str = ""):
        super().__init__(message)
        self.failure = failure
        self.log_tail = log_tail
        self.log_path = log_path


class EngineStartError(_EngineFailure):
    """vLLM did not become healthy."""


class EngineCrashed(_EngineFailure):
    """vLLM died after it was healthy."""


class EngineArgsError(EngineError):
    exit_code = 2


class ServerRefused(EngineError):
    """A server that ``autotune bench`` was pointed at (and never started) cannot be measured."""

    exit_code = 2


class StorageError(AutotuneError):
    """Raised ``from`` the database's own error, ``str()`` also says that error's cause in words and
    its fix, in one line (read-only, disk full, locked, unreachable), in place of Optuna's guess
    "invalid data in the commit, e.g. exceeding max length", which it gives for every failed commit."""

    def __str__(self) -> str:
        return _with_storage_cause(super().__str__(), self.__cause__)


class StudyNotFoundError(StorageError):
    """``--study`` names a study that the storage does not hold: bad input, like a missing file."""

    exit_code = 2


class StudyBusyError(AutotuneError):
    exit_code = 6


class ExportError(AutotuneError):
    pass


class PromoteHookError(AutotuneError):
    """The promote hook failed; the new export stays where it was written. The tool exits with the
    hook's own code (``exit_code``: 128+N for a hook ended by signal N), so a CronJob's failure
    policy or an alert sees what the hook said."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code if 0 < exit_code < 256 else 1


# (category, fix, what the database's own message says), matched lower-case on each error of the chain
_STORAGE_CAUSES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "the database is read-only",
        "make the database file and its directory writable by this user, or pass another --storage",
        ("readonly database", "read-only database", "read-only transaction", "read-only file system"),
    ),
    (
        "the disk is full",
        "free space on the disk that holds the database",
        (
            "database or disk is full",
            "no space left on device",
            "could not extend file",
            "disk quota exceeded",
        ),
    ),
    (
        "the database is locked",
        "another process holds its lock: wait for it to finish, or use PostgreSQL for many workers",
        ("database is locked", "database table is locked", "lock timeout", "could not obtain lock"),
    ),
    (
        "the database is unreachable",
        "check the URL's host, port and database name and that the server runs; for SQLite, that the "
        "directory exists and can be written",
        (
            "connection refused",
            "could not connect",
            "connection failed",
            "could not translate host name",
            "name or service not known",
            "timeout expired",
            "connection timed out",
            "no route to host",
            "network is unreachable",
            "server closed the connection",
            "unable to open database file",
        ),
    ),
)
_OPTUNA_COMMIT_GUESS = (
    "An exception is raised during the commit. This typically happens due to invalid data in the commit, "
    "e.g. exceeding max length."
)


def _storage_cause(exc: BaseException | None) -> tuple[str, str, str] | None:
    """(category, fix, the database's first line) of the first error in the chain that says one."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        orig = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's error
        for err in (orig, exc) if isinstance(orig, BaseException) else (exc,):
            first = (str(err).strip().splitlines() or [""])[0]
            for category, fix, needles in _STORAGE_CAUSES:
                if any(n in first.lower() for n in needles):
                    return category, fix, first.removeprefix("(sqlite3.OperationalError) ")
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def _with_storage_cause(message: str, cause: BaseException | None) -> str:
    found = _storage_cause(cause)
    if found is None:
        return message
    category, fix, first = found
    text = " ".join(message.replace(_OPTUNA_COMMIT_GUESS, first).split())
    if first in text:
        return f"{text} ({category}; fix: {fix})"
    return f"{text}: {category}: {first} (fix: {fix})"
