"""vLLM's flags, launcher and command lines as the rest of the tool asks about them.

Nothing above ``engine/`` spells a vLLM flag (a test reads every string literal of the package for
them): it asks here for what a command sets, in typed answers (its parallel ranks, its served name,
its block size, where its host pool lives), and for the launcher and the per-trial flags.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from autotune.space import FlagPairs, flag_pairs, flag_stem

__all__ = [
    "API_SERVER_MODULE",
    "HOST_POOL_FLAGS",
    "MEMORY_KNOB_FLAGS",
    "PER_TRIAL_FLAGS",
    "PP_FLAGS",
    "SERVE_LAUNCHER",
    "TP_FLAGS",
    "block_size_of",
    "budget_flag",
    "command_launcher",
    "command_model_and_flags",
    "config_command",
    "fixed_max_model_len",
    "fixes_budget",
    "flag_int",
    "flags_less",
    "host_pool_flag",
    "model_args",
    "parallel_ranks",
    "same_flags",
    "served_name",
    "transfer_config",
]

SERVE_LAUNCHER = ("vllm", "serve")
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# Set by autotune for each trial, meaningless in deployment.
PER_TRIAL_FLAGS = frozenset({"--host", "--port"})
# The flags that size a host (CPU) KV pool directly.
HOST_POOL_FLAGS = ("--kv-offloading-size",)
TP_FLAGS = ("--tensor-parallel-size", "--tensor_parallel_size", "-tp")
PP_FLAGS = ("--pipeline-parallel-size", "--pipeline_parallel_size", "-pp")
# Flags whose smaller values make a configuration need less memory, in the order a baseline tries them.
MEMORY_KNOB_FLAGS = ("--gpu-memory-utilization", "--kv-cache-memory-bytes")
_MODEL = "--model"
# The flag each kind of a group's shared memory budget is given to an engine by.
_BUDGET_FLAGS = {"kv_bytes": "--kv-cache-memory-bytes", "gpu_share": "--gpu-memory-utilization"}
_TRANSFER = "--kv-transfer-config"


def flag_int(argv: Sequence[str], names: Sequence[str]) -> int | None:
    """The last value of one of ``names`` in ``argv`` (``--x 2`` or ``--x=2``), None when absent."""
    found: int | None = None
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name not in names:
            continue
        text = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        try:
            found = int(text)
        except ValueError:
            continue
    return found


def parallel_ranks(engine_argv: Sequence[str]) -> int:
    """GPUs one engine of this command occupies: tensor-parallel x pipeline-parallel size."""
    return max(1, flag_int(engine_argv, TP_FLAGS) or 1) * max(1, flag_int(engine_argv, PP_FLAGS) or 1)


def host_pool_flag(argv: Sequence[str]) -> str | None:
    """The host pool a command sets with a flag (``--kv-offloading-size``), as written (GiB)."""
    tokens = list(argv)
    for i, tok in enumerate(tokens):
        name, _, inline = tok.partition("=")
        if name in HOST_POOL_FLAGS:
            return inline or (tokens[i + 1] if i + 1 < len(tokens) else "")
    return None


def transfer_config(argv: Sequence[str]) -> dict[str, Any] | None:
    """The command's ``--kv-transfer-config`` object (None: none)."""
    if _TRANSFER in argv:
        parsed: dict[str, Any] = json.loads(argv[list(argv).index(_TRANSFER) + 1])
        return parsed
    return None


def served_name(fixed: FlagPairs) -> str | None:
    """The name the fixed flags serve the model under (``--served-model-name``), if any."""
    return next((v for n, v in fixed if n == "--served-model-name"), None)


def fixed_max_model_len(fixed: FlagPairs) -> int | None:
    """``--max-model-len`` among the fixed flags, None when absent; ``ValueError`` when unreadable."""
    for name, value in fixed:
        if name.replace("_", "-") == "--max-model-len" and value:
            return int(value)
    return None


def block_size_of(args: Sequence[str] | None) -> int | None:
    """The command's ``--block-size``, None when it sets none (or an unreadable one)."""
    for name, value in flag_pairs(list(args or [])):
        if name == "--block-size" and value:
            try:
                return int(value)
            except ValueError:
                continue
    return None


def budget_flag(role: str) -> str:
    """The flag that gives one engine its part of a shared memory budget: ``kv_bytes`` (its KV bytes) or
    ``gpu_share`` (its share of the GPU)."""
    return _BUDGET_FLAGS[role]


def fixes_budget(fixed: FlagPairs, role: str) -> bool:
    """Whether the fixed flags set the flag of a shared budget's ``role`` (:func:`budget_flag`)."""
    stem = flag_stem(budget_flag(role))
    return any(flag_stem(name) == stem for name, _ in fixed)


def model_args(model: str) -> list[str]:
    """The arguments that name the model to vLLM's parser."""
    return [_MODEL, model]


def config_command(launcher: Sequence[str], config_path: str) -> tuple[str, ...]:
    """The command that serves a ``vllm serve --config`` file."""
    return (*launcher, "--config", config_path)


def command_model_and_flags(command: Sequence[str]) -> tuple[str | None, list[str], FlagPairs]:
    """(model, the tokens before the first flag, the flags) of a stored vLLM command: ``vllm serve MODEL
    --flags...`` or ``python -P -m vllm.entrypoints.openai.api_server --model MODEL --flags...``; the
    model None where no ``--model`` names it (the caller takes the last head token)."""
    first = next((i for i, tok in enumerate(command) if tok.startswith("--")), len(command))
    head, flags = list(command[:first]), list(command[first:])
    pairs = flag_pairs(flags)
    model = next((v for n, v in pairs if n == _MODEL and v), None)
    kept = tuple((n, v) for n, v in pairs if n not in PER_TRIAL_FLAGS and n != _MODEL)
    return model, head, kept


def command_launcher(command: Sequence[str]) -> tuple[str, ...]:
    """How a stored trial command started vLLM: ``("vllm", "serve")`` of ``vllm serve MODEL ...``, or
    ``(python, "-P", "-m", "vllm.entrypoints.openai.api_server")`` (the model given by ``--model``)."""
    first = next((i for i, tok in enumerate(command) if tok.startswith("--")), len(command))
    head = tuple(command[:first])
    return head[:-1] if head[-2:-1] == ("serve",) else head


def same_flags(a: Sequence[str], b: Sequence[str]) -> bool:
    """Do two engine commands set the same flags to the same values, order aside?"""

    def pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
        return sorted(flag_pairs(list(argv), positional=[]), key=lambda p: (p[0], p[1] or ""))

    return pairs(a) == pairs(b)


def flags_less(flags: Sequence[str], other: Sequence[str]) -> list[str]:
    """``flags`` less every flag ``other`` sets (the fixed flags of a command, less its tuned ones);
    ``ValueError`` names a token that is not a flag."""
    drop = {n for n, _ in flag_pairs(list(other))}
    kept = [(n, v) for n, v in flag_pairs(list(flags)) if n not in drop]
    return [tok for n, v in kept for tok in ((n,) if v is None else (n, v))]
