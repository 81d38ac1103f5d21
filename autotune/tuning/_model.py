"""Check the model before any launch: a local directory must hold a ``config.json``; a hub name
must be in the local Hugging Face cache when vLLM runs offline (the tool starts it with
``HF_HUB_OFFLINE=1`` unless the environment says otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

from autotune.errors import ConfigError

__all__ = ["check_model", "looks_like_hub_name"]


def looks_like_hub_name(model: str) -> bool:
    """``org/name`` (one slash, no leading ``.``, ``/`` or ``~``) that is not a local path."""
    if model.startswith((".", "/", "~")) or Path(model).exists():
        return False
    parts = model.split("/")
    return len(parts) == 2 and all(parts)


def _in_hf_cache(model: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - vLLM depends on huggingface_hub
        return False
    found = try_to_load_from_cache(model, "config.json")
    return isinstance(found, str)


def check_model(model: str) -> None:
    """Raise :class:`ConfigError` (one line, exit 2) when vLLM could not load ``model`` here."""
    if looks_like_hub_name(model):
        offline = os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False", "")
        if offline and not _in_hf_cache(model):
            raise ConfigError(
                f"--model: {model!r} is not a local directory and not in the Hugging Face cache, and vLLM "
                "runs offline here (HF_HUB_OFFLINE=1) (fix: download it first, e.g. "
                f"`huggingface-cli download {model}`, or pass a local model directory)"
            )
        return
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(
            f"--model: {model} does not exist (fix: pass a model directory that holds config.json)"
        )
    if not path.is_dir():
        raise ConfigError(f"--model: {model} is not a directory (fix: pass the model's directory)")
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"--model: {model} holds no config.json (fix: pass the directory of a Hugging Face model)"
        )
