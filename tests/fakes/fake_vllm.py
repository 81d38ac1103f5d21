"""A fake OpenAI-compatible vLLM server for fast study-loop tests and fault injection.

Launched exactly like vLLM (``python tests/fakes/fake_vllm.py --model M --host H --port P ...``);
it prints vLLM-like start-up lines, serves /health, /metrics, /v1/models and streaming
/v1/completions and /v1/chat/completions. Its latency is a made-up function of the flags,
so a study has something to find. Nothing it produces is a measurement of anything.

Faults, from the environment:
  FAKE_START_DELAY=S        sleep S seconds before listening
  FAKE_FAIL_START=KIND      print vLLM's text for KIND (oom|no_kv|bad_flag|crash) and exit
  FAKE_CRASH_AFTER=N        die (exit 1) when request N+1 arrives
  FAKE_IGNORE_SIGTERM=1     ignore SIGTERM (the supervisor must SIGKILL)
  FAKE_SPAWN_CHILD=1        start a child process that would outlive a naive kill
  FAKE_SHM_PREFIX=P         leave a 64 KiB file /dev/shm/P<pid> behind (as torch's psm_* segments)
  FAKE_OOM_BLOCK_SIZE=B     fail start with an out-of-memory error when --block-size is B
  FAKE_REQUIRE_KEY=1        require VLLM_API_KEY as a bearer token on /v1/* (GET /v1/models too, as vLLM)
  FAKE_CHECK_LENGTH=1       answer HTTP 400 with vLLM's error body when prompt words + max_tokens
                            exceed --max-model-len (vLLM checks this per request, after start-up)
  FAKE_TTFT_S=S             a fixed time to first token (e.g. 0 for replayer load tests)
  FAKE_SERIAL=1             serve one request at a time (the others wait: arrivals faster than that queue,
                            a server saturated on purpose)
  FAKE_TTFT_SCALE=X         multiply the modelled time to first token (so it dominates the HTTP overhead)
  FAKE_STARVED_FACTOR=X     how many times slower a starved KV pool (below 16M) is (default 3)
  FAKE_KV_TIERS=S:X,...     a KV pool below S (e.g. 12M) has its time to first token multiplied by X (the
                            smallest S it is below; replaces FAKE_STARVED_FACTOR's one 16M tier)
  FAKE_RESTART_JITTER=CV    each start draws a factor N(1, CV) for its time to first token
  FAKE_RESET_KEEPS=1        POST /reset_prefix_cache answers success but keeps the cache (a leaking tier)
  FAKE_LMCACHE_LOG=1        print LMCache's lookup line for each request (as LMCacheConnectorV1 does):
                            "Reqid: cmpl-N, Total tokens W, LMCache hit tokens: H, need to load: H/2"
/metrics has vLLM's counters it models and the gauge vllm:num_requests_waiting (requests queued behind
FAKE_SERIAL's one at a time; 0 otherwise).
POST /reset_prefix_cache empties its prefix cache, and exists only with VLLM_SERVER_DEV_MODE=1 (as vLLM).
A --kv-cache-memory-bytes below 16M triples the time to first token (a starved KV pool).

It accepts a deep backlog of connections (the replayer opens up to 1024 at once) and answers a
request with ``max_tokens: 1`` in one chunk, so a replay of 100,000 tiny requests is cheap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_FAIL_TEXT = {
    "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "no_kv": "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
    "bad_flag": "fake_vllm: error: argument --block-size: invalid choice: 7",
    "crash": "RuntimeError: Engine core initialization failed. See root cause above.",
}


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--kv-cache-memory-bytes", default="64M")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--dtype", default="auto")  # float32: 4-byte values, twice the KV bytes a token
    args, _unknown = p.parse_known_args()
    return args


class _FirstComeFirstServed:
    """One request at a time, in the order they came (as vLLM's scheduler admits them; a plain
    lock would serve waiting requests in any order)."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._next = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turn:
            ticket = self._next
            self._next += 1
            while self._serving != ticket:
                self._turn.wait()

    def __exit__(self, *exc: object) -> None:
        with self._turn:
            self._serving += 1
            self._turn.notify_all()

    @property
    def waiting(self) -> int:
        """Requests holding a ticket that are not being served yet (vLLM's num_requests_waiting)."""
        with self._turn:
            return max(0, self._next - self._serving - 1)


class _State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lock = threading.Lock()
        self.serial = _FirstComeFirstServed()  # FAKE_SERIAL=1: held while a request is served
        self.requests = 0
        self.prompt_tokens = 0
        self.gen_tokens = 0
        self.ttft_sum = 0.0
        self.queries = 0
        self.hits = 0
        self.seen: set[str] = set()
        self.resets = 0
        bs = args.block_size
        mnbt = args.max_num_batched_tokens
        # Made-up latency model with an interior optimum: block size 64, larger batches better.
        self.ttft_s = 0.004 + 0.002 * abs(bs - 64) / 32 + 2.0 / mnbt
        self.itl_s = 0.001
        if not args.enable_prefix_caching:
            self.ttft_s += 0.004
        self.ttft_s *= _kv_factor(_kv_bf16_bytes(args))
        self.ttft_s *= float(os.environ.get("FAKE_TTFT_SCALE") or 1.0)
        jitter = float(os.environ.get("FAKE_RESTART_JITTER") or 0.0)
        if jitter:  # run-to-run noise of a restarted server (CV), as a real engine shows
            self.ttft_s *= max(0.2, random.SystemRandom().gauss(1.0, jitter))
        if os.environ.get("FAKE_TTFT_S"):
            self.ttft_s = float(os.environ["FAKE_TTFT_S"])


def _too_long(prompt_tokens: int, max_tokens: int, max_model_len: int) -> dict[str, object]:
    """vLLM's 400 body for a request that does not fit (the shape of vLLM >= 0.10's ErrorResponse)."""
    message = (
        f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
        f"context length is {max_model_len} tokens and your request has {prompt_tokens} input tokens "
        f"({max_tokens} > {max_model_len} - {prompt_tokens}). None"
    )
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


def _kv_factor(pool: int) -> float:
    """How much slower a KV pool of ``pool`` bytes makes the first token: a starved pool evicts prefixes."""
    tiers = os.environ.get("FAKE_KV_TIERS")
    if not tiers:
        return float(os.environ.get("FAKE_STARVED_FACTOR") or 3.0) if pool < 16 * 2**20 else 1.0
    pairs = sorted(
        (_size_bytes(size), float(factor)) for size, factor in (t.split(":") for t in tiers.split(","))
    )
    return next((factor for size, factor in pairs if pool < size), 1.0)


def _kv_bf16_bytes(args: argparse.Namespace) -> int:
    """The KV pool in bytes of 2-byte values: under ``--dtype float32`` (as autotune launches the CPU
    build on x86 without AVX-512, its pool doubled) the same tokens take twice the bytes."""
    wide = 2 if args.dtype in ("float32", "float") else 1
    return _size_bytes(args.kv_cache_memory_bytes) // wide


def _size_bytes(text: str) -> int:
    """vLLM's sizes: 64M = 64 MiB, 1G = 1 GiB, a plain number = bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = str(text).strip()
    unit = text[-1:].upper()
    return int(float(text[:-1]) * units[unit]) if unit in units else int(float(text))


def _make_handler(state: _State):
    # FAKE_REQUIRE_KEY=1: the key vLLM was given (VLLM_API_KEY), or FAKE_EXPECTED_KEY when it was given none
    key = (
        (os.environ.get("VLLM_API_KEY") or os.environ.get("FAKE_EXPECTED_KEY"))
        if os.environ.get("FAKE_REQUIRE_KEY")
        else None
    )
    crash_after = int(os.environ.get("FAKE_CRASH_AFTER", "0") or 0)
    check_length = bool(os.environ.get("FAKE_CHECK_LENGTH"))
    model_name = state.args.model or state.args.model_tag

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # each SSE chunk is its own small write: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK hold every response for ~40 ms
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *a: object) -> None:
            pass

        def _json(self, code: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200, {})
            elif self.path == "/v1/models":
                if key and self.headers.get("Authorization") != f"Bearer {key}":
                    self._json(401, {"error": "Unauthorized"})
                    return
                self._json(200, {"data": [{"id": model_name}]})
            elif self.path == "/version":
                self._json(200, {"version": "0.0.0-fake"})
            elif self.path == "/metrics":
                s = state
                text = (
                    f'vllm:prefix_cache_queries_total{{engine="0"}} {s.queries}\n'
                    f'vllm:prefix_cache_hits_total{{engine="0"}} {s.hits}\n'
                    f'vllm:prompt_tokens_total{{engine="0"}} {s.prompt_tokens}\n'
                    f'vllm:generation_tokens_total{{engine="0"}} {s.gen_tokens}\n'
                    f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {s.ttft_sum}\n'
                    f'vllm:time_to_first_token_seconds_count{{engine="0"}} {s.requests}\n'
                    "# TYPE vllm:num_requests_waiting gauge\n"
                    f'vllm:num_requests_waiting{{engine="0"}} {s.serial.waiting}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._json(401, {"error": "Unauthorized"})
                return
            if self.path.split("?")[0] == "/reset_prefix_cache":
                if os.environ.get("VLLM_SERVER_DEV_MODE") != "1":
                    self._json(404, {"detail": "Not Found"})
                    return
                with state.lock:
                    state.resets += 1
                    print(f"fake_vllm: prefix cache reset {state.resets}", flush=True)
                    if not os.environ.get("FAKE_RESET_KEEPS"):
                        state.seen.clear()
                self._json(200, {"success": True})
                return
            with state.lock:
                state.requests += 1
                n = state.requests
            if crash_after and n > crash_after:
                print("RuntimeError: fake engine core died", flush=True)
                os._exit(1)
            chat = self.path.endswith("/chat/completions")
            prompt = json.dumps(body.get("messages")) if chat else str(body.get("prompt", ""))
            words = prompt.split()
            max_tokens = int(body.get("max_tokens") or 16)
            if check_length and len(words) + max_tokens > state.args.max_model_len:
                self._json(400, _too_long(len(words), max_tokens, state.args.max_model_len))
                return
            bs_words = max(1, state.args.block_size // 4)
            hit = 0
            with state.lock:
                for i in range(bs_words, len(words) + 1, bs_words):
                    h = " ".join(words[:i])
                    if h in state.seen and state.args.enable_prefix_caching:
                        hit = i
                    state.seen.add(h)
                state.queries += len(words)
                state.hits += hit
                state.prompt_tokens += len(words)
            if os.environ.get("FAKE_LMCACHE_LOG"):  # words stand for tokens
                print(
                    f"[LMCache INFO] Reqid: cmpl-{n}-0, Total tokens {len(words)}, "
                    f"LMCache hit tokens: {hit}, need to load: {hit // 2}",
                    flush=True,
                )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            ttft = state.ttft_s * (1.0 - 0.5 * hit / max(len(words), 1))
            with state.serial if os.environ.get("FAKE_SERIAL") else contextlib.nullcontext():
                if ttft > 0:
                    time.sleep(ttft)
                with state.lock:
                    state.ttft_sum += ttft
                    state.gen_tokens += max_tokens
                for i in range(max_tokens):
                    if i:
                        time.sleep(state.itl_s)
                    choice = (
                        {"index": 0, "delta": {"content": f"w{i} "}}
                        if chat
                        else {"index": 0, "text": f"w{i} "}
                    )
                    self._chunk({"choices": [choice]})
            self._chunk(
                {"choices": [], "usage": {"prompt_tokens": len(words), "completion_tokens": max_tokens}}
            )
            self._raw(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, obj: object) -> None:
            self._raw(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def _raw(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 4096  # listen backlog (5 by default: a burst of connections would be refused)


_HELD: list[object] = []  # files kept open for the process's life


def main() -> None:
    args = _parse()
    print(f"INFO fake vLLM starting: model={args.model or args.model_tag} pid={os.getpid()}", flush=True)
    if os.environ.get("FAKE_IGNORE_SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("FAKE_SHM_PREFIX"):  # like torch's psm_* segments: held while it runs, left when killed
        segment = open(f"/dev/shm/{os.environ['FAKE_SHM_PREFIX']}{os.getpid()}", "wb")  # noqa: SIM115
        segment.write(b"\0" * 65536)
        segment.flush()
        _HELD.append(segment)
    if os.environ.get("FAKE_SPAWN_CHILD"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"INFO spawned child pid={child.pid}", flush=True)
    time.sleep(float(os.environ.get("FAKE_START_DELAY", "0") or 0))
    fail = os.environ.get("FAKE_FAIL_START")
    if os.environ.get("FAKE_OOM_BLOCK_SIZE") and int(os.environ["FAKE_OOM_BLOCK_SIZE"]) == args.block_size:
        fail = "oom"
    if fail:
        print(_FAIL_TEXT[fail], flush=True)
        sys.exit(2 if fail == "bad_flag" else 1)
    tokens = _kv_bf16_bytes(args) // 2048
    print(
        f"INFO CPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{args.max_model_len:,} tokens per request: {tokens / args.max_model_len:.2f}x",
        flush=True,
    )
    server = _Server((args.host, args.port), _make_handler(_State(args)))
    print("INFO:     Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
