"""A captured chat keeps its conversation: the turns of one session share a `session_id` (the
client's X-Session-Id header, else its `user` field, else the conversation's opening), hashed, so
the replay reuses the prefix as multi-turn traffic does; the client's own value is never stored."""

from __future__ import annotations

import json

from autotune.capture._records import CapturedRequest, to_record

CHAT = "/v1/chat/completions"


def _chat(messages: list[dict[str, str]], session: str | None = None, **body: object) -> dict:
    raw = json.dumps({"messages": messages, "max_tokens": 8, **body}).encode()
    return to_record(CapturedRequest(arrival=1_700_000_000.0, path=CHAT, body=raw, session=session))


def test_the_turns_of_one_conversation_share_a_derived_session_id() -> None:
    sys_msg = {"role": "system", "content": "You are a support agent."}
    turn1 = _chat([sys_msg, {"role": "user", "content": "My order is late."}])
    turn2 = _chat(
        [
            sys_msg,
            {"role": "user", "content": "My order is late."},
            {"role": "assistant", "content": "Sorry to hear that."},
            {"role": "user", "content": "It is order 42."},
        ]
    )
    other = _chat([sys_msg, {"role": "user", "content": "How do I return a lamp?"}])
    assert turn1["session_id"] == turn2["session_id"] != other["session_id"]
    assert turn1["session_id"].startswith("prefix-")


def test_a_header_or_user_field_wins_and_is_stored_hashed() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    by_header = _chat(msgs, session="conv-7", user="alice@example.com")
    assert by_header["session_id"].startswith("header-") and "conv-7" not in json.dumps(by_header)
    by_user = _chat(msgs, user="alice@example.com")
    assert by_user["session_id"].startswith("user-") and "alice" not in json.dumps(by_user)
    assert _chat(msgs, user="alice@example.com")["session_id"] == by_user["session_id"]


def test_a_completion_has_no_session_unless_the_client_names_one() -> None:
    raw = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()
    assert "session_id" not in to_record(CapturedRequest(arrival=1.0, path="/v1/completions", body=raw))
    named = to_record(CapturedRequest(arrival=1.0, path="/v1/completions", body=raw, session="s1"))
    assert named["session_id"].startswith("header-")
