"""Search spaces: YAML files declaring what to tune and how each value reaches vLLM."""

from __future__ import annotations

from autotune.space._argv import (
    FlagPairs,
    flag_pairs,
    flag_stem,
    flags_to_argv,
    merge_flag_items,
    split_engine_arg,
)
from autotune.space._config import EngineConfig
from autotune.space._fixed import fix_space
from autotune.space._load import load_search_space
from autotune.space._model import PROFILE_NAMES, Condition, Parameter, SearchSpace
from autotune.space._profile import EngineProfileLike, apply_profile, describe_target
from autotune.space._render import RenderedConfig, describe_values, format_value, json_value, merge_json
from autotune.space._roles import (
    HOST_POOL_FIELDS,
    MEMORY_ROLES,
    ROLES,
    SHARE_KEYS,
    Role,
    RoleNames,
    measured_bytes,
)

__all__ = [
    "HOST_POOL_FIELDS",
    "MEMORY_ROLES",
    "PROFILE_NAMES",
    "ROLES",
    "SHARE_KEYS",
    "Condition",
    "EngineConfig",
    "EngineProfileLike",
    "FlagPairs",
    "Parameter",
    "RenderedConfig",
    "Role",
    "RoleNames",
    "SearchSpace",
    "apply_profile",
    "describe_target",
    "describe_values",
    "fix_space",
    "flag_pairs",
    "flag_stem",
    "flags_to_argv",
    "format_value",
    "json_value",
    "load_search_space",
    "measured_bytes",
    "merge_flag_items",
    "merge_json",
    "split_engine_arg",
]
