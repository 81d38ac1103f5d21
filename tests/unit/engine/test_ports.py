"""Engine ports: outside the ephemeral range, reserved until the engine stops, and a health check
that another server answers on our port does not count as ours being up."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.engine import LaunchSpec
from autotune.engine._ports import candidate_ports, reserve_port
from autotune.engine._process import EngineProcess
from autotune.errors import EngineStartError
from autotune.space import RenderedConfig


def test_candidate_ports_avoid_the_ephemeral_range() -> None:
    assert candidate_ports((32768, 60999)) == range(10000, 32768)
    assert candidate_ports((1024, 60000)) == range(60001, 65536)


def test_a_reserved_port_is_not_handed_out_again_until_released(tmp_path: Path) -> None:
    held = [reserve_port(directory=tmp_path) for _ in range(40)]
    ports = [r.port for r in held]
    assert len(set(ports)) == len(ports)
    lo, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert all(p < lo for p in ports) or all(p > lo for p in ports)
    # another process (a second worker) skips every one of them
    code = (
        "import sys; from pathlib import Path; from autotune.engine._ports import reserve_port; "
        "print(' '.join(str(reserve_port(directory=Path(sys.argv[1])).port) for _ in range(40)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert not set(map(int, out.split())) & set(ports)
    for r in held:
        r.release()


SQUAT = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

LATE = "import time; time.sleep(30)"  # an 'engine' that never binds its port


def test_a_health_answer_from_another_server_is_not_our_engine(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    squatter = subprocess.Popen([sys.executable, "-c", SQUAT, str(port)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        spec = LaunchSpec(
            model="m", launcher=(sys.executable, "-c", LATE), startup_timeout_s=3, stop_timeout_s=1
        )
        engine = EngineProcess(spec, RenderedConfig(args=()), tmp_path / "e.log", port=port)
        engine.start()
        with pytest.raises(EngineStartError, match="not healthy after 3 s"):
            engine.wait_healthy(poll_s=0.2)
    finally:
        squatter.kill()
        squatter.wait()


def test_a_released_port_leaves_no_lock_file(tmp_path: Path) -> None:
    r = reserve_port(directory=tmp_path)
    assert (tmp_path / f"port-{r.port}.lock").exists()
    r.release()
    assert list(tmp_path.iterdir()) == []
