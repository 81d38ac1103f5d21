"""Search spaces: YAML files declaring what to tune and how each value reaches vLLM."""

from __future__ import annotations

from autotune.space._argv import FlagPairs, flag_pairs, flags_to_argv
from autotune.space._load import load_search_space
from autotune.space._model import PROFILE_NAMES, Condition, Parameter, RenderTarget, SearchSpace
from autotune.space._profile import EngineProfileLike, apply_profile, describe_target
from autotune.space._render import RenderedConfig, describe_values, render_values

__all__ = [
    "PROFILE_NAMES",
    "Condition",
    "EngineProfileLike",
    "FlagPairs",
    "Parameter",
    "RenderTarget",
    "RenderedConfig",
    "SearchSpace",
    "apply_profile",
    "describe_target",
    "describe_values",
    "flag_pairs",
    "flags_to_argv",
    "load_search_space",
    "render_values",
]
