"""Search spaces: YAML files declaring what to tune and how each value reaches vLLM."""

from __future__ import annotations

from autotune.space._load import load_search_space
from autotune.space._model import Condition, Parameter, SearchSpace
from autotune.space._render import RenderedConfig, render_values

__all__ = ["Condition", "Parameter", "RenderedConfig", "SearchSpace", "load_search_space", "render_values"]
