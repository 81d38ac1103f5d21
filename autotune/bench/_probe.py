"""Before measuring a server that is already running (``autotune bench --url``): is it there, does it
take our key, which model does it serve. Each refusal is one line naming the URL, the cause and the fix.

The replayer's client connects directly: it reads no proxy from the environment (``trust_env=False``,
:mod:`autotune.bench._transport`), so a ``http_proxy`` meant for the outside world never carries a
request to a local server. When the server cannot be reached and such a variable is set, the error says
that autotune did not use it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from autotune.errors import ServerRefused

__all__ = ["PROXY_VARIABLES", "ServerFacts", "probe_server", "proxy_variables", "server_root"]

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


@dataclass(frozen=True)
class ServerFacts:
    """What the server said about itself before the replay."""

    url: str  # its root, as requests are sent to it (``/v1/...`` appended)
    model: str  # the model the replay asks for
    models: tuple[str, ...]  # every model it serves
    version: str | None = None  # vLLM's ``GET /version``, when it answers


def server_root(url: str) -> str:
    """``--url`` as the replayer takes it: ``http(s)://host:port`` (a trailing ``/`` or ``/v1``, the
    OpenAI clients' base URL, is dropped)."""
    text = url.strip().rstrip("/")
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise ServerRefused(
            f"--url {url!r}: not a URL ({exc}) (fix: e.g. --url http://127.0.0.1:8000)"
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ServerRefused(f"--url {url!r}: not an http(s) URL (fix: e.g. --url http://127.0.0.1:8000)")
    if parsed.userinfo:
        raise ServerRefused(
            f"--url {parsed.copy_with(username=None, password=None)}: credentials in the URL would be "
            "logged and recorded (fix: the key in an environment variable, named by --api-key-env)"
        )
    return text.removesuffix("/v1")


def proxy_variables(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The proxy variables set in ``environ`` (names only: a proxy URL may hold a password)."""
    return tuple(name for name in PROXY_VARIABLES if environ.get(name))


def _unreachable(url: str, exc: httpx.HTTPError, environ: Mapping[str, str]) -> ServerRefused:
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    proxies = proxy_variables(environ)
    host = httpx.URL(url).host
    if proxies and host not in _LOOPBACK:
        return ServerRefused(
            f"--url {url}: cannot connect ({cause}); {', '.join(proxies)} is set, but autotune connects "
            "directly, never through a proxy, so its timings are the server's (fix: reach the server "
            "directly from here, e.g. `ssh -L 8000:127.0.0.1:8000 HOST` and --url http://127.0.0.1:8000)"
        )
    unused = f"; {', '.join(proxies)} is set but not used" if proxies else ""
    return ServerRefused(
        f"--url {url}: cannot connect ({cause}{unused}) (fix: start the server, or correct --url; "
        "autotune bench never starts one)"
    )


def _refused(url: str, path: str, resp: httpx.Response, key_env: str | None, sent_key: bool) -> ServerRefused:
    code = resp.status_code
    if code in (401, 403):
        why = f"refused the key in ${key_env}" if sent_key else "requires an API key and none was sent"
        fix = (
            f"set {key_env} to the key the server was started with"
            if sent_key
            else "--api-key-env NAME, the environment variable that holds the server's key"
        )
        return ServerRefused(f"--url {url}: GET {path} answered HTTP {code}: the server {why} (fix: {fix})")
    if code == 404:
        return ServerRefused(
            f"--url {url}: GET {path} answered HTTP 404: no OpenAI-compatible server at this address "
            "(fix: the server's root URL, e.g. http://HOST:8000)"
        )
    body = " ".join(resp.text.split())[:160]
    return ServerRefused(
        f"--url {url}: GET {path} answered HTTP {code}: {body} (fix: check the server's log; "
        "it must serve the OpenAI API)"
    )


def _pick_model(url: str, served: tuple[str, ...], model: str | None) -> str:
    if model is not None:
        if served and model not in served:
            raise ServerRefused(
                f"--url {url}: the server serves no model {model!r} (it serves {', '.join(served)}) "
                f"(fix: --model {served[0]})"
            )
        return model
    if len(served) == 1:
        return served[0]
    if not served:
        raise ServerRefused(f"--url {url}: GET /v1/models lists no model (fix: pass --model NAME)")
    raise ServerRefused(
        f"--url {url}: the server serves {len(served)} models ({', '.join(served)}) "
        f"(fix: --model NAME, one of them)"
    )


async def probe_server(
    client: httpx.AsyncClient,
    url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    api_key_env: str | None = None,
    models_path: str = "/v1/models",
    environ: Mapping[str, str] = os.environ,
) -> ServerFacts:
    """Ask ``url`` (a :func:`server_root`) for its models, with the key; the model to replay
    (``model``, checked against the list; by default the only one served). Raises
    :class:`~autotune.errors.ServerRefused` when it cannot be reached or refuses."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = await client.get(url + models_path, headers=headers, timeout=10.0)
    except httpx.HTTPError as exc:
        raise _unreachable(url, exc, environ) from None
    if resp.status_code != 200:
        raise _refused(url, models_path, resp, api_key_env, bool(api_key))
    try:
        data = resp.json().get("data") or []
        served = tuple(str(m["id"]) for m in data)
    except (ValueError, AttributeError, KeyError, TypeError):
        raise ServerRefused(
            f"--url {url}: GET {models_path} did not answer an OpenAI model list (fix: the URL of an "
            "OpenAI-compatible server, e.g. vLLM's)"
        ) from None
    chosen = _pick_model(url, served, model)
    return ServerFacts(url=url, model=chosen, models=served, version=await _version(client, url, headers))


async def _version(client: httpx.AsyncClient, url: str, headers: Mapping[str, str]) -> str | None:
    """vLLM's version from ``GET /version`` (other servers: None)."""
    try:
        resp = await client.get(url + "/version", headers=dict(headers), timeout=5.0)
        value = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(value) if value else None
