"""The environment an engine inherits: autotune's own, less the secrets vLLM has no use for.

The rule is a deny-list, not an allow-list. vLLM reads a large, open-ended set of variables
(``vllm/envs.py`` alone declares over 200 ``VLLM_*``; CUDA, NCCL, UCX, Gloo, OpenMP, Triton,
torch, LMCache, vendor plugins, proxies and ``LD_*`` add more), and the point of a tuning run is to
measure the engine as it will be deployed from the same shell. An allow-list would silently drop
a variable that changes the engine's behaviour and measure something else. So everything passes
except what this module withholds:

1. autotune's own secret sources, whatever their value: ``AUTOTUNE_STORAGE`` and
   ``AUTOTUNE_STORAGE_URL`` (a storage URL may carry its password), every ``PG*`` variable
   (libpq's ``PGPASSWORD``, ``PGPASSFILE``, ``PGSERVICEFILE``..., the storage's credentials), the
   variable ``--api-key-env`` names, and any variable whose value is the API key (so the key's
   source goes even when its name is not known here). An inherited ``VLLM_API_KEY`` is dropped too:
   the key reaches vLLM as ``VLLM_API_KEY`` only when autotune was given one.
2. names that say they hold a secret: a ``_``-separated word ``PASSWORD``, ``PASSWD``, ``PASS``,
   ``PASSPHRASE``, ``SECRET``, ``TOKEN``, ``CREDENTIAL(S)``, or an ending ``_API_KEY``,
   ``_ACCESS_KEY``, ``_PRIVATE_KEY`` (``GITHUB_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``).
   Model code run with ``--trust-remote-code``, plugins and crash reports see the environment;
   these have no business there. Not withheld by name: vLLM's own namespace ``VLLM_*`` (its
   ``*_TOKEN_THRESHOLD`` knobs are tuning flags), and what vLLM's model loaders read to fetch
   weights: ``HF_TOKEN`` and ``HUGGING_FACE_HUB_TOKEN`` (gated Hub models), ``MODELSCOPE_API_TOKEN``,
   ``S3_ACCESS_KEY_ID``/``S3_SECRET_ACCESS_KEY`` (tensorizer, ``vllm/envs.py``), the ``AWS_*``
   credentials and ``GOOGLE_APPLICATION_CREDENTIALS`` (``s3://``/``gs://`` models through the Run:ai
   streamer).

A name in ``pass_env`` passes whatever rule 2 says (rule 1 always holds: the tool's storage
password and the key's source never reach an engine). Only names are logged, never values.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

__all__ = ["ENGINE_SECRET_NAMES", "engine_environ", "withheld_names"]

log = logging.getLogger(__name__)

_TOOL_SECRETS = frozenset({"AUTOTUNE_STORAGE", "AUTOTUNE_STORAGE_URL", "VLLM_API_KEY"})
_LIBPQ = re.compile(r"^PG[A-Z]+$")  # PGPASSWORD, PGPASSFILE, PGHOST, ... (libpq's variables)
_SECRET_WORDS = frozenset(
    {"PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "SECRET", "SECRETS", "TOKEN", "CREDENTIAL", "CREDENTIALS"}
)
_SECRET_ENDINGS = ("_API_KEY", "_ACCESS_KEY", "_PRIVATE_KEY")
# Secret-looking names that vLLM or its model loaders read (see the module's docstring).
ENGINE_SECRET_NAMES = frozenset(
    {
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "MODELSCOPE_API_TOKEN",
        "S3_ACCESS_KEY_ID",
        "S3_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
    }
)


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    if upper in ENGINE_SECRET_NAMES or upper.startswith("VLLM_"):
        return False
    return bool(_SECRET_WORDS.intersection(upper.split("_"))) or upper.endswith(_SECRET_ENDINGS)


def _tool_secret(name: str, value: str, api_key: str | None, api_key_env: str | None) -> bool:
    if name in _TOOL_SECRETS or _LIBPQ.match(name) or name == api_key_env:
        return True
    return bool(api_key) and value == api_key


def withheld_names(
    environ: Mapping[str, str],
    *,
    api_key: str | None = None,
    api_key_env: str | None = None,
    pass_env: Iterable[str] = (),
) -> list[str]:
    """The names of ``environ`` that :func:`engine_environ` withholds, sorted."""
    passed = set(pass_env)
    return sorted(
        name
        for name, value in environ.items()
        if _tool_secret(name, value, api_key, api_key_env) or (_looks_secret(name) and name not in passed)
    )


def engine_environ(
    environ: Mapping[str, str],
    *,
    api_key: str | None = None,
    api_key_env: str | None = None,
    pass_env: Iterable[str] = (),
) -> dict[str, str]:
    """``environ`` without the secrets of the module's rules; the key itself is not added here."""
    withheld = set(withheld_names(environ, api_key=api_key, api_key_env=api_key_env, pass_env=pass_env))
    if withheld:
        log.debug("not passed to the engine: %s", ", ".join(sorted(withheld)))
    return {name: value for name, value in environ.items() if name not in withheld}
