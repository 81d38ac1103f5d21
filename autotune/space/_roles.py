"""Parameter roles: what a parameter of a space *is*, whatever the user calls it.

A space names its parameters freely; ``role:`` beside the flag says which of them is the memory
share, the KV size, the host pool, ... The prior, the memory guard, the host clamp, the report and
the export ask a space for the parameter with a role (:meth:`SearchSpace.name_of`), so a renamed
parameter (``host_pool`` for ``cpu_swap_space_gb``) keeps them working. This module and the space
files are the only places that know parameter names: a parameter without ``role:`` whose name is
one of :data:`LEGACY_NAMES` (the names the bundled spaces used before roles) takes that role, so
spaces written before roles, and the studies stored with them, read as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, get_args

__all__ = [
    "HOST_POOL_FIELDS",
    "LEGACY_NAMES",
    "MEMORY_ROLES",
    "ROLES",
    "SHARE_KEYS",
    "Role",
    "RoleNames",
    "legacy_roles",
    "measured_bytes",
]

Role = Literal[
    "gpu_share",  # share of the accelerator's memory vLLM takes (--gpu-memory-utilization)
    "kv_bytes",  # an explicit KV cache size (--kv-cache-memory-bytes)
    "kv_pool",  # the host (CPU) KV offload pool, in GiB
    "block_size",  # tokens per KV block
    "kv_dtype",  # the KV cache's data type
    "batched_tokens",  # token budget of one scheduler step
    "max_seqs",  # requests one scheduler step runs at once
    "prefix_caching",  # prefix caching on/off
    "swap_threshold",  # tokens a host-pool hit must add before it is used
    "offload_block",  # the offload connector's chunk size
    "offload_eviction",  # the offload connector's eviction policy
]
ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True)
class RoleNames:
    """The name a space gives each role (None: no parameter has it). ``space.roles.kv_pool``."""

    gpu_share: str | None = None
    kv_bytes: str | None = None
    kv_pool: str | None = None
    block_size: str | None = None
    kv_dtype: str | None = None
    batched_tokens: str | None = None
    max_seqs: str | None = None
    prefix_caching: str | None = None
    swap_threshold: str | None = None
    offload_block: str | None = None
    offload_eviction: str | None = None

    @classmethod
    def of(cls, role_to_name: Mapping[str, str]) -> RoleNames:
        """From role -> name (unknown roles, e.g. of a newer tool's stored study, are left out)."""
        known = {f.name for f in fields(cls)}
        return cls(**{r: n for r, n in role_to_name.items() if r in known})

    @classmethod
    def guessed(cls, names: Iterable[str]) -> RoleNames:
        """The roles of parameters ``names`` by the pre-role names (a study stored before roles)."""
        return cls.of({r: n for n, r in legacy_roles(names).items()})

    def as_dict(self) -> dict[str, str]:
        """Role -> name, the roles some parameter has (how a study stores them)."""
        return {f.name: n for f in fields(self) if (n := getattr(self, f.name)) is not None}


# The roles whose value changes a memory verdict (the KV capacity, the pool, the activations).
MEMORY_ROLES: frozenset[str] = frozenset(
    {"gpu_share", "kv_bytes", "kv_pool", "block_size", "kv_dtype", "batched_tokens", "max_seqs"}
)
# The names the bundled spaces gave each role before ``role:`` existed.
LEGACY_NAMES: Mapping[str, Role] = {
    "gpu_memory_utilization": "gpu_share",
    "kv_cache_memory_bytes": "kv_bytes",
    "cpu_swap_space_gb": "kv_pool",
    "block_size": "block_size",
    "kv_cache_dtype": "kv_dtype",
    "max_num_batched_tokens": "batched_tokens",
    "max_num_seqs": "max_seqs",
    "enable_prefix_caching": "prefix_caching",
    "swap_in_threshold": "swap_threshold",
    "offload_block_size": "offload_block",
    "offload_eviction_policy": "offload_eviction",
}
# A group file's ``share:`` key for each budget a group's models split (vLLM's own argument names):
# on GPUs the share of each GPU, on the CPU build the KV bytes.
SHARE_KEYS: Mapping[Role, str] = {"gpu_share": "gpu_memory_utilization", "kv_bytes": "kv_cache_memory_bytes"}
# The fields of ``--kv-transfer-config``'s ``kv_connector_extra_config`` that size a host KV pool, with
# their unit in bytes: vLLM's OffloadingConnector, vllm-ascend's CPUOffloadingConnector, LMCache (GiB
# per tensor-parallel rank).
HOST_POOL_FIELDS: Mapping[str, int] = {
    "cpu_bytes_to_use": 1,
    "cpu_swap_space_gb": 2**30,
    "lmcache.max_local_cpu_size": 2**30,
}


def legacy_roles(names: Iterable[str], taken: Iterable[str] = ()) -> dict[str, Role]:
    """Name -> role for the ``names`` that carry a pre-role name whose role is not ``taken``."""
    claimed = set(taken)
    out: dict[str, Role] = {}
    for name in names:
        role = LEGACY_NAMES.get(name)
        if role is not None and role not in claimed:
            out[name] = role
            claimed.add(role)
    return out


_ROLE_LINE = re.compile(rb"^[ \t]*role:[^\n]*\n", re.MULTILINE)


def measured_bytes(path: Path) -> bytes:
    """A space file's bytes less its ``role:`` lines, as a study's fingerprint hashes them (b"" when it
    is missing): a role says what a parameter is, not what is measured, so a space file that gains
    roles still resumes the studies made with it."""
    try:
        return _ROLE_LINE.sub(b"", path.read_bytes())
    except OSError:
        return b""
