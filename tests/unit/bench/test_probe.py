"""What ``autotune bench`` says of a server before it replays anything (issue 36)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from autotune.bench import probe_server, server_root
from autotune.errors import ServerRefused


def _probe(handler: httpx.MockTransport, url: str, **kwargs: object) -> str:
    async def go() -> str:
        async with httpx.AsyncClient(transport=handler) as client:
            return (await probe_server(client, url, **kwargs)).model  # type: ignore[arg-type]

    return asyncio.run(go())


def _down(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("Connect call failed")


def test_a_remote_server_out_of_reach_with_a_proxy_set_says_autotune_does_not_use_it() -> None:
    env = {"HTTPS_PROXY": "http://user:pw@proxy:3128"}
    with pytest.raises(ServerRefused) as info:
        _probe(httpx.MockTransport(_down), "http://gpu-7.example:8000", environ=env)
    text = str(info.value)
    assert text.startswith("--url http://gpu-7.example:8000: cannot connect")
    assert "HTTPS_PROXY is set, but autotune connects directly" in text and "ssh -L" in text
    assert "pw" not in text


def test_several_models_need_a_choice_and_one_is_taken_by_default() -> None:
    def models(names: list[str]) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: httpx.Response(200, json={"data": [{"id": n} for n in names]}))

    assert _probe(models(["only"]), "http://h:1") == "only"
    with pytest.raises(ServerRefused, match=r"serves 2 models \(a, b\) \(fix: --model NAME"):
        _probe(models(["a", "b"]), "http://h:1")
    assert _probe(models(["a", "b"]), "http://h:1", model="b") == "b"


def test_a_url_is_taken_as_the_openai_clients_write_it_and_credentials_are_refused() -> None:
    assert server_root("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    with pytest.raises(ServerRefused, match="credentials in the URL") as info:
        server_root("http://me:s3cret@host:8000")
    assert "s3cret" not in str(info.value)
    with pytest.raises(ServerRefused, match="not an http"):
        server_root("host:8000")
