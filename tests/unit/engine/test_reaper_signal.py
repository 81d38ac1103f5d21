"""SIGTERM to a command that started no engine (`autotune capture`) unwinds without a log line about
stopping engines it never had."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from tests.conftest import REPO

_CHILD = textwrap.dedent(
    """
    import logging, os, signal, time
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from autotune.engine import install_signal_handlers
    install_signal_handlers()
    try:  # "ready" inside the try: a SIGTERM sent as soon as it is read still lands in here
        print("ready", flush=True)
        time.sleep(30)
    except KeyboardInterrupt:
        print("unwound", flush=True)
    """
)


def test_sigterm_without_engines_says_nothing_of_stopping_them() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", _CHILD], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert "unwound" in out, err
    assert "stopping" not in err, err
