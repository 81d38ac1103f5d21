"""The workload-shaped warm-up's requests: as long as the workload's longest, sharing no prefix."""

from __future__ import annotations

from collections import Counter

from autotune.bench._warmup import WARM_MAX_TOKENS, shuffled_like
from autotune.workload import ChatMessage, WorkloadRequest


def _req(i: int, text: str, max_tokens: int = 64) -> WorkloadRequest:
    return WorkloadRequest(index=i, line=i + 1, id=f"r{i}", max_tokens=max_tokens, prompt=text)


def test_the_longest_requests_are_sent_with_their_words_shuffled_and_short_outputs() -> None:
    doc = " ".join(f"word{k}" for k in range(200))
    reqs = [_req(0, "short question"), _req(1, doc + " first?"), _req(2, doc + " second question?", 8),
            _req(3, "another short one")]  # fmt: skip
    out = shuffled_like(reqs, 2)
    assert len(out) == 2
    for got, src in zip(out, (reqs[2], reqs[1]), strict=True):  # longest first
        assert got.prompt is not None and src.prompt is not None
        assert Counter(got.prompt.split()) == Counter(src.prompt.split())  # same words, same length
        assert got.prompt.split()[:16] != src.prompt.split()[:16]  # but not the same first block
        assert got.max_tokens == min(src.max_tokens, WARM_MAX_TOKENS)
        assert got.id.startswith("warmup-")
    assert shuffled_like(reqs, 2) == out  # seeded: every trial warms up alike


def test_chat_requests_keep_their_roles_with_each_message_shuffled() -> None:
    system = " ".join(f"rule{k}" for k in range(50))
    req = WorkloadRequest(index=0, line=1, id="c0", max_tokens=4,
                          messages=(ChatMessage("system", system), ChatMessage("user", "what now then?")))  # fmt: skip
    (got,) = shuffled_like([req], 5)
    assert got.messages is not None and got.prompt is None
    assert [m.role for m in got.messages] == ["system", "user"]
    assert Counter(got.messages[0].content.split()) == Counter(system.split())
    assert got.messages[0].content != system
