"""Warm-up before the measured replay: requests that never prime the workload's prefixes.

Short unrelated requests leave the engine's first full-length prefills to the first measured pass.
With ``like`` (the workload's requests), the warm-up sends the ``count`` longest of them together,
each with its words shuffled: about as many tokens and the same vocabulary, but no prompt block in
common with the workload, so nothing it leaves in the prefix cache can serve a measured request.
On the CPU build (benchmarks/RESULTS.md, issue 14 (3)), restarts alternating the two warm-ups on a
quiet machine: the first pass's p90 at most 1.08x the second's (1.24x with the short warm-up). On
the H200 neither warm-up left the first pass slow; the emptying after this one also empties the
native offload connector's host tier.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

import httpx

from autotune.bench._request import ReplayTarget, send_request
from autotune.workload import ChatMessage, WorkloadRequest

__all__ = ["WARM_MAX_TOKENS", "shuffled_like", "warm_up"]

WARM_MAX_TOKENS = 16  # enough decode steps to run a decode batch; the prefill is what warms
_WARM_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
               "kilo", "lima")  # fmt: skip


def _shuffle(text: str, rng: random.Random) -> str:
    words = text.split()
    rng.shuffle(words)
    return " ".join(words)


def shuffled_like(requests: Sequence[WorkloadRequest], count: int, seed: int = 0) -> list[WorkloadRequest]:
    """The ``count`` longest requests (by text), each with its words shuffled, ``max_tokens`` capped."""
    rng = random.Random(seed)
    longest = sorted(requests, key=lambda r: (-len(r.text()), r.index))[:count]
    out: list[WorkloadRequest] = []
    for i, r in enumerate(longest):
        msgs = r.messages and tuple(ChatMessage(m.role, _shuffle(m.content, rng)) for m in r.messages)
        prompt = r.prompt and _shuffle(r.prompt, rng)
        cap = min(r.max_tokens, WARM_MAX_TOKENS)
        out.append(
            WorkloadRequest(index=i, line=0, id=f"warmup-{i}", max_tokens=cap, prompt=prompt, messages=msgs)
        )
    return out


def _short(count: int, chat: bool, seed: int) -> list[WorkloadRequest]:
    rng = random.Random(seed)
    out: list[WorkloadRequest] = []
    for i in range(count):
        words = " ".join(rng.choice(_WARM_WORDS) for _ in range(24))
        prompt, msgs = (None, (ChatMessage("user", words),)) if chat else (words, None)
        out.append(
            WorkloadRequest(index=i, line=0, id=f"warmup-{i}", max_tokens=4, prompt=prompt, messages=msgs)
        )
    return out


async def warm_up(
    client: httpx.AsyncClient,
    target: ReplayTarget,
    *,
    count: int,
    chat: bool,
    seed: int = 0,
    like: Sequence[WorkloadRequest] = (),
) -> int:
    """Send ``count`` warm-up requests; how many succeeded. Without ``like``: short unrelated
    prompts, one after another. With it: :func:`shuffled_like` of those requests, all at once."""
    if not like:
        ok = 0
        for req in _short(count, chat, seed):
            ok += await _send(client, target, req)
        return ok
    sent = await asyncio.gather(*(_send(client, target, req) for req in shuffled_like(like, count, seed)))
    return sum(sent)


async def _send(client: httpx.AsyncClient, target: ReplayTarget, req: WorkloadRequest) -> int:
    timing, _ = await send_request(
        client, target, req, req.message_dicts(), t0=time.perf_counter(), scheduled=0
    )
    return int(timing.ok)
