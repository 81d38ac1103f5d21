"""Replay a workload against an OpenAI-compatible server over HTTP, streaming, and time it.

Sessions are the unit of arrival: a session's first turn starts at its planned offset (or
when a closed-loop slot frees up); each later turn is sent only after the previous turn of
the same session completed, plus its ``think_time``. With ``history="actual"``, the previous
turns' real outputs replace the recorded assistant messages of the next turn, in order, so
the prefix grows exactly as it would in production.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from autotune.bench._arrivals import ArrivalSpec, plan_offsets
from autotune.bench._timing import RequestTiming
from autotune.workload import ChatMessage, Workload, WorkloadRequest

__all__ = ["ReplayResult", "ReplayTarget", "replay", "warm_up"]

log = logging.getLogger(__name__)

History = Literal["recorded", "actual"]


@dataclass(frozen=True)
class ReplayTarget:
    base_url: str
    model: str
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class ReplayResult:
    timings: tuple[RequestTiming, ...]
    duration_s: float  # first send to last completion
    arrival: str


def _body(
    req: WorkloadRequest, model: str, messages: list[dict[str, str]] | None
) -> tuple[str, dict[str, Any]]:
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if req.prompt is not None:
        return "/v1/completions", {**common, "prompt": req.prompt}
    return "/v1/chat/completions", {**common, "messages": messages}


def _chunk_text(obj: dict[str, Any]) -> str:
    choice = obj["choices"][0]
    if "text" in choice:
        return str(choice.get("text") or "")
    return str((choice.get("delta") or {}).get("content") or "")


async def _send(
    client: httpx.AsyncClient,
    target: ReplayTarget,
    req: WorkloadRequest,
    messages: list[dict[str, str]] | None,
    *,
    t0: float,
    scheduled: float,
) -> tuple[RequestTiming, str]:
    path, body = _body(req, target.model, messages)
    st = time.perf_counter()
    ttft: float | None = None
    last = st
    itl: list[float] = []
    out_tokens = 0
    prompt_tokens: int | None = None
    text: list[str] = []
    error: str | None = None
    try:
        async with client.stream("POST", target.base_url + path, json=body, headers=target.headers()) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread()).decode(errors="replace")[:200]
                error = f"HTTP {resp.status_code}: {detail}"
            else:
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    obj = json.loads(data)
                    if obj.get("choices"):
                        now = time.perf_counter()
                        if ttft is None:
                            ttft = now - st
                        else:
                            itl.append(now - last)
                        last = now
                        text.append(_chunk_text(obj))
                    usage = obj.get("usage")
                    if usage:
                        out_tokens = int(usage.get("completion_tokens") or 0)
                        prompt_tokens = usage.get("prompt_tokens")
                if ttft is None and error is None:
                    error = "stream ended without output"
    except (httpx.HTTPError, json.JSONDecodeError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    latency = (last - st) if ttft is not None else None
    timing = RequestTiming(
        request_id=req.id,
        session=req.session_id,
        scheduled=scheduled,
        sent=st - t0,
        ttft=ttft,
        latency=latency,
        itl=tuple(itl),
        output_tokens=out_tokens if out_tokens else (len(itl) + 1 if ttft is not None else 0),
        prompt_tokens=prompt_tokens,
        error=error,
    )
    return timing, "".join(text)


def _messages_for(
    req: WorkloadRequest, outputs: Sequence[str], history: History
) -> list[dict[str, str]] | None:
    if req.messages is None:
        return None
    msgs = [m.as_dict() for m in req.messages]
    if history == "actual" and outputs:
        k = 0
        for m in msgs:
            if m["role"] == "assistant" and k < len(outputs):
                m["content"] = outputs[k]
                k += 1
    return msgs


async def _sleep_until(t0: float, offset: float) -> None:
    delay = t0 + offset - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def replay(
    client: httpx.AsyncClient,
    target: ReplayTarget,
    workload: Workload,
    arrival: ArrivalSpec,
    *,
    history: History = "recorded",
    on_done: Callable[[RequestTiming], None] | None = None,
) -> ReplayResult:
    sessions = list(workload.sessions().values())
    offsets = plan_offsets([s[0].timestamp for s in sessions], arrival)
    timings: list[RequestTiming] = []
    t0 = time.perf_counter()

    async def run_session(turns: Sequence[WorkloadRequest], start: float) -> None:
        outputs: list[str] = []
        ready = start
        first_ts = turns[0].timestamp
        for i, req in enumerate(turns):
            if i > 0 and arrival.mode == "timestamps" and req.timestamp is not None and first_ts is not None:
                ready = max(ready, start + (req.timestamp - first_ts) / arrival.speed)
            await _sleep_until(t0, ready)
            timing, text = await _send(
                client, target, req, _messages_for(req, outputs, history), t0=t0, scheduled=ready
            )
            timings.append(timing)
            if on_done is not None:
                on_done(timing)
            outputs.append(text)
            think = turns[i + 1].think_time / arrival.speed if i + 1 < len(turns) else 0.0
            ready = max(ready, time.perf_counter() - t0) + think

    if offsets is not None:
        await asyncio.gather(*(run_session(s, float(o)) for s, o in zip(sessions, offsets, strict=True)))
    else:
        queue: asyncio.Queue[Sequence[WorkloadRequest]] = asyncio.Queue()
        for s in sessions:
            queue.put_nowait(s)

        async def worker() -> None:
            while not queue.empty():
                s = queue.get_nowait()
                await run_session(s, time.perf_counter() - t0)

        assert arrival.concurrency is not None
        await asyncio.gather(*(worker() for _ in range(min(arrival.concurrency, len(sessions)))))
    end = max((t.sent + (t.latency or 0.0) for t in timings), default=0.0)
    start = min((t.sent for t in timings), default=0.0)
    timings.sort(key=lambda t: t.sent)
    return ReplayResult(timings=tuple(timings), duration_s=max(end - start, 1e-9), arrival=arrival.describe())


_WARM_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


async def warm_up(
    client: httpx.AsyncClient, target: ReplayTarget, *, count: int, chat: bool, seed: int = 0
) -> int:
    """Send ``count`` short requests unrelated to the workload (they do not prime its prefixes)."""
    rng = random.Random(seed)
    ok = 0
    for i in range(count):
        words = " ".join(rng.choice(_WARM_WORDS) for _ in range(24))
        if chat:
            req = WorkloadRequest(
                index=i, line=0, id=f"warmup-{i}", max_tokens=4, messages=(ChatMessage("user", words),)
            )
        else:
            req = WorkloadRequest(index=i, line=0, id=f"warmup-{i}", max_tokens=4, prompt=words)
        timing, _ = await _send(
            client, target, req, _messages_for(req, [], "recorded"), t0=time.perf_counter(), scheduled=0
        )
        ok += timing.ok
    return ok
