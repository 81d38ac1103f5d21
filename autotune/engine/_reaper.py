"""No vLLM process outlives the tool: every live engine is stopped at exit and on signals."""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Protocol

__all__ = ["install_signal_handlers", "live_count", "register", "stop_all", "unregister"]

log = logging.getLogger(__name__)


class _Stoppable(Protocol):
    def stop(self) -> None: ...


_live: dict[int, _Stoppable] = {}
_lock = threading.Lock()


def register(engine: _Stoppable) -> None:
    with _lock:
        _live[id(engine)] = engine


def unregister(engine: _Stoppable) -> None:
    with _lock:
        _live.pop(id(engine), None)


def live_count() -> int:
    with _lock:
        return len(_live)


def stop_all() -> None:
    with _lock:
        engines = list(_live.values())
    for engine in engines:
        with contextlib.suppress(Exception):
            engine.stop()


atexit.register(stop_all)


_terminated: list[int] = []  # the SIGTERM/SIGHUP received (empty: none)


def terminated() -> bool:
    """Has a SIGTERM or SIGHUP arrived? The unwinding it starts can be swallowed where it lands (a
    KeyboardInterrupt raised inside a weakref callback is only printed), so a loop asks this between
    its steps and stops there."""
    return bool(_terminated)


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """Stop the engines, then unwind exactly as Ctrl-C would.

    The current SIGINT handler decides how: inside ``asyncio.run`` it is the runner's, which
    cancels the main task so the replay unwinds through its own cancellation (a KeyboardInterrupt
    raised here could land inside httpcore's shielded close and surface as a RuntimeError instead);
    elsewhere it is Python's default, which raises KeyboardInterrupt.
    """
    _terminated.append(signum)
    with _lock:
        live = len(_live)
    if live:  # a command that started none (capture, bench) has none to stop, and says nothing of them
        log.warning("received signal %s: stopping %d engine(s)", signal.Signals(signum).name, live)
    stop_all()
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP stop the engines and unwind like Ctrl-C (main thread only)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_terminate)
