"""One configuration as it crosses the engine seam: typed values, rendered only by the engine.

The study hands the engine an :class:`EngineConfig`: what it chose, by parameter (each parameter of
the space names its role and how its engine takes it), plus what a group sets by role with no
parameter of its own (a model's share of the group's budget). The engine alone turns it into a
command line (``Engine.render``, ``Engine.argv``) and reads its memory sizing (``Engine.sizing``):
the KV pool's value goes from the study to the launch in one direction, and nothing above
``engine/`` reads a flag back.

A configuration that comes back in its engine's own words (a trial's record, an exported file, a
command given to ``autotune bench``) is carried as those words (``flags``, ``env``) and passed
through as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from autotune.space._model import SearchSpace
from autotune.space._roles import Role

__all__ = ["EngineConfig"]


_K = TypeVar("_K")


def _frozen(mapping: Mapping[_K, Any]) -> Mapping[_K, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class EngineConfig:
    """A configuration for one engine (immutable). ``values``: tunable parameter of ``space`` ->
    value (inactive ones absent); ``roles``: role -> value set with no parameter (rendered after the
    values); ``flags`` and ``env``: a configuration in its engine's own words, passed through."""

    values: Mapping[str, Any] = field(default_factory=dict)
    space: SearchSpace | None = field(default=None, compare=False, repr=False)
    roles: Mapping[Role, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.values and self.space is None:
            raise ValueError("EngineConfig: values need the space whose parameters they are")
        object.__setattr__(self, "values", _frozen(self.values))
        object.__setattr__(self, "roles", _frozen(self.roles))
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "flags", tuple(self.flags))

    @classmethod
    def chosen(cls, space: SearchSpace, values: Mapping[str, Any]) -> EngineConfig:
        """What a study chose in ``space`` (empty ``values``: the engine's defaults)."""
        return cls(values=dict(values), space=space if values else None)

    @classmethod
    def recorded(
        cls, flags: tuple[str, ...] | list[str], env: Mapping[str, str] | None = None
    ) -> EngineConfig:
        """A configuration in its engine's own words (a record's, a file's)."""
        return cls(flags=tuple(flags), env=dict(env or {}))

    def with_role(self, role: Role, value: Any) -> EngineConfig:
        """This configuration with ``role`` set to ``value`` (a group model's share of the budget)."""
        return EngineConfig(self.values, self.space, {**self.roles, role: value}, self.flags, self.env)

    def value(self, role: Role) -> Any | None:
        """The value this configuration gives ``role`` (None: none; the engine's default, or its words)."""
        if role in self.roles:
            return self.roles[role]
        name = getattr(self.space.roles, role) if self.space is not None else None
        return self.values.get(name) if name is not None else None
