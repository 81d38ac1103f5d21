"""``autotune capture`` in front of the fake vLLM server: bytes pass through unchanged, records land
in the hourly file, a broken recorder never fails a request, and the disk bound holds."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autotune.workload import load_tokenizer, load_traffic, load_workload
from tests.conftest import FAKE_VLLM

AUTOTUNE = [sys.executable, "-c", "from autotune.cli import main; main()"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{url}: process exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''!r}"
            )
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not up after {timeout} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(150)  # the writer may still be loading the tokenizer (20+ s on a busy machine)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    port = _port()
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_VLLM), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "FAKE_TTFT_S": "0.001"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url, proc)
        yield url
    finally:
        _stop(proc)


class _Capture:
    def __init__(self, upstream: str, out: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            "capture",
            "--upstream",
            upstream,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--out",
            str(out),
            *extra,
        ]
        self.proc = subprocess.Popen(
            [*AUTOTUNE, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def __enter__(self) -> _Capture:
        _wait_up(self.url, self.proc)
        return self

    def stop(self) -> str:
        """Stop the proxy (its recorder writes what is queued first); its output."""
        _stop(self.proc)
        return self.proc.stdout.read().decode() if self.proc.stdout else ""

    def __exit__(self, *exc: object) -> None:
        _stop(self.proc)


CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "alpha beta gamma delta epsilon"}],
    "max_tokens": 5,
}
COMPLETION = {"model": "m", "prompt": "zeta eta theta iota kappa lambda", "max_tokens": 3}


def _post(base: str, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=30)


@pytest.mark.parametrize("stream", [True, False])
def test_responses_pass_through_byte_for_byte_and_are_recorded(
    upstream: str, tmp_path: Path, stream: bool
) -> None:
    with _Capture(upstream, tmp_path, "--raw") as cap:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            direct = _post(upstream, path, {**body, "stream": stream})
            proxied = _post(cap.url, path, {**body, "stream": stream})
            assert proxied.status_code == direct.status_code == 200
            assert proxied.content == direct.content and len(direct.content) > 100
            assert proxied.headers["content-type"] == direct.headers["content-type"]
        models = httpx.get(cap.url + "/v1/models", timeout=10)
        assert models.status_code == httpx.get(upstream + "/v1/models", timeout=10).status_code
        cap.stop()

    files = list(tmp_path.glob("traffic-*.jsonl"))
    assert [f.name for f in files] == [time.strftime("traffic-%Y%m%dT%H.jsonl", time.gmtime())] or len(
        files
    ) == 2
    w = load_traffic(tmp_path)  # the folder reads back as a workload
    assert [r.messages[0].content if r.messages else r.prompt for r in w.requests] == [
        CHAT["messages"][0]["content"],  # type: ignore[index]
        COMPLETION["prompt"],
    ]
    assert [r.max_tokens for r in w.requests] == [5, 3]


def test_anonymized_records_keep_token_counts_and_no_text(
    upstream: str, tmp_path: Path, tiny_model: Path
) -> None:
    out = tmp_path / "traffic"
    with _Capture(
        upstream, out, "--model", str(tiny_model), "--salt-env", "CAP_SALT", env={"CAP_SALT": "k"}
    ) as cap:
        assert _post(cap.url, "/v1/chat/completions", CHAT).status_code == 200
        assert _post(cap.url, "/v1/completions", COMPLETION).status_code == 200
        log = cap.stop()

    text = "".join(p.read_text() for p in out.glob("traffic-*.jsonl"))
    assert text, log
    assert "alpha" not in text and "kappa" not in text
    recorded = load_traffic(out)
    tok = load_tokenizer(tiny_model)
    original = load_workload(_write(tmp_path / "orig.jsonl", [CHAT, COMPLETION]))
    assert [len(tok.prompt_ids(r)) for r in recorded.requests] == [
        len(tok.prompt_ids(r)) for r in original.requests
    ]


def _write(path: Path, bodies: list[dict[str, object]]) -> Path:
    keep = ("messages", "prompt", "max_tokens")
    path.write_text("".join(json.dumps({k: b[k] for k in keep if k in b}) + "\n" for b in bodies))
    return path


def test_a_failing_recorder_does_not_fail_requests(upstream: str, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the folder should be")
    with _Capture(upstream, blocker / "traffic", "--raw") as cap:
        responses = [_post(cap.url, "/v1/chat/completions", CHAT) for _ in range(5)]
        log = cap.stop()

    assert [r.status_code for r in responses] == [200] * 5
    assert "cannot write" in log  # the recorder did fail, and said so


def test_the_disk_bound_removes_the_oldest_files(upstream: str, tmp_path: Path) -> None:
    old = tmp_path / "traffic-20200101T00.jsonl"
    old.write_text(json.dumps({"prompt": "x " * 40, "max_tokens": 1}) + "\n" * 1 + "#" * 60_000)
    bound_mb = 0.05  # 52,428 bytes: the old file alone is over it
    with _Capture(upstream, tmp_path, "--raw", "--max-disk-mb", str(bound_mb)) as cap:
        for _ in range(20):
            assert _post(cap.url, "/v1/completions", COMPLETION).status_code == 200
        cap.stop()

    assert not old.exists()
    sizes = [p.stat().st_size for p in tmp_path.glob("traffic-*.jsonl")]
    assert sizes and sum(sizes) <= bound_mb * 2**20
    assert sum(1 for p in tmp_path.glob("traffic-*.jsonl") for _ in p.open()) == 20


class _SlowStream(threading.Thread):
    """An upstream that answers every request with an endless chunked stream, a chunk every 20 ms,
    and notes when its client (the proxy) closed the connection under it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.served = threading.Event()
        self.closed = threading.Event()

    def run(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = conn.recv(65536)
            if request.startswith(b"GET /health"):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                return
            self.served.set()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            chunk = b'data: {"choices":[{"text":"x"}]}\n\n'
            try:
                for _ in range(1500):  # 30 s at most
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    time.sleep(0.02)
            except OSError:  # the proxy closed its connection: vLLM would abort the request here
                self.closed.set()


def test_a_client_that_goes_away_mid_stream_closes_the_upstream_request(tmp_path: Path) -> None:
    """vLLM aborts a request whose client disconnects; through the proxy it must see that too, not
    generate on for nobody."""
    upstream = _SlowStream()
    upstream.start()
    with _Capture(upstream.url, tmp_path, "--raw") as cap:
        with httpx.stream(
            "POST", cap.url + "/v1/completions", json={**COMPLETION, "stream": True}, timeout=10
        ) as r:
            first = next(r.iter_bytes())
            assert first.startswith(b"data: ")
        # the client is gone; the upstream's writes fail once the proxy has closed its connection
        assert upstream.closed.wait(5), "the proxy kept reading the upstream's stream after its client left"
        assert _post_health(cap.url) == 200  # and the proxy serves on
        cap.stop()
    assert upstream.served.is_set()


def _post_health(base: str) -> int:
    return httpx.get(base + "/health", timeout=10).status_code
