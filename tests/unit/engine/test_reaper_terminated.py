"""A SIGTERM is remembered: its unwinding (a KeyboardInterrupt raised wherever the main thread is)
can be swallowed where it lands, e.g. inside a weakref callback, so ``run`` asks ``terminated()``
after each trial and stops there (CI saw a study run two more trials after one)."""

from __future__ import annotations

import signal

import pytest

from autotune.engine import _reaper, terminated


def test_a_sigterm_is_remembered_after_its_handler_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reaper, "_terminated", [])
    assert not terminated()
    previous = signal.signal(signal.SIGINT, lambda *_: None)  # an unwinding that went nowhere
    try:
        _reaper._on_terminate(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert terminated()
