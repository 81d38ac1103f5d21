"""Fake evaluators written over a configuration's words, as an engine reads them.

The study hands an evaluator an :class:`~autotune.space.EngineConfig`; a fake that acts as the
engine renders it as vLLM would (``VLLM.render``) and decides on the flags, as the real engine does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.engine import VLLM
from autotune.space import EngineConfig, RenderedConfig
from autotune.study import TrialRecord

__all__ = ["OverWords", "over_words"]


class OverWords:
    """A fake evaluator: subclasses write ``measure(number, rendered, listener)``."""

    def measure(self, number: int, rendered: RenderedConfig, listener: Any = None) -> TrialRecord:
        raise NotImplementedError

    def __call__(self, number: int, config: EngineConfig, listener: Any = None) -> TrialRecord:
        return self.measure(number, self.render(config), listener)

    def render(self, config: EngineConfig) -> RenderedConfig:
        return VLLM.render(config)


class _Fn(OverWords):
    def __init__(self, fn: Callable[..., TrialRecord]) -> None:
        self.fn = fn

    def measure(self, number: int, rendered: RenderedConfig, listener: Any = None) -> TrialRecord:
        return self.fn(number, rendered, listener)


def over_words(fn: Callable[..., TrialRecord]) -> OverWords:
    """``fn(number, rendered, listener)`` as an evaluator (a decorator)."""
    return _Fn(fn)
