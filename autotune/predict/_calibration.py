"""The calibration file: a study's fitted engine costs and measured errors, saved so that
``autotune predict`` can predict on the same machine, model and engine version without a GPU.

JSON, versioned (:data:`VERSION`)::

    {"version": 1, "machine": "...", "model": "...", "engine": "vllm 0.x (cpu build)",
     "costs": {...EngineCosts...}, "errors": [0.04, -0.1, ...],
     "defaults": {...EngineDefaults...}, "space": "search_spaces/cpu.yaml"}

A file that cannot be read, a missing or unknown key or a bad value is a :class:`ConfigError`
naming the file, the key, the value and the fix.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.predict._candidate import EngineDefaults
from autotune.predict._costs import EngineCosts

__all__ = ["VERSION", "Calibration", "this_machine"]

VERSION = 1
_KEYS = ("version", "machine", "model", "engine", "costs", "errors", "defaults", "space")
_OPTIONAL_COSTS = {"host_s_per_token", "requests"}


def this_machine() -> str:
    """The machine a calibration holds for: its CPU model and logical CPUs."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs"


@dataclass(frozen=True)
class Calibration:
    machine: str
    model: str
    engine: str
    costs: EngineCosts
    errors: tuple[float, ...]
    defaults: EngineDefaults
    space: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "machine": self.machine,
            "model": self.model,
            "engine": self.engine,
            "costs": self.costs.as_dict(),
            "errors": list(self.errors),
            "defaults": {f.name: getattr(self.defaults, f.name) for f in fields(EngineDefaults)},
            "space": self.space,
        }

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> Calibration:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the calibration file ({exc.strerror}) (fix: pass "
                              "--calibration the file an earlier study saved)") from exc  # fmt: skip
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not JSON ({exc.msg}, line {exc.lineno}) (fix: pass the calibration "
                              "file as a study saved it)") from exc  # fmt: skip
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> Calibration:
        def bad(key: str, value: Any, fix: str) -> ConfigError:
            return ConfigError(f"{path}: key {key!r}: {value!r} {fix}")

        if not isinstance(data, Mapping):
            raise bad(
                "(top level)", type(data).__name__, "is not an object (fix: a calibration is a JSON object)"
            )
        if data.get("version") != VERSION:
            raise bad("version", data.get("version"), f"is not a version this tool reads (fix: {VERSION}; "
                      "save the calibration again with this version of the tool)")  # fmt: skip
        if unknown := sorted(set(data) - set(_KEYS)):
            raise bad(
                unknown[0],
                data[unknown[0]],
                f"is not a key of a calibration (fix: remove it; keys: {', '.join(_KEYS)})",
            )
        for key in ("machine", "model", "engine"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise bad(key, data.get(key), "is not a non-empty string (fix: the value the study saved)")
        costs = _numbers(
            data.get("costs"), [f.name for f in fields(EngineCosts)], _OPTIONAL_COSTS, "costs", bad
        )
        names = [f.name for f in fields(EngineDefaults)]
        defaults = _numbers(data.get("defaults"), names, set(), "defaults", bad)
        errors = data.get("errors")
        if not isinstance(errors, list) or not all(_finite(e) for e in errors):
            raise bad("errors", errors, "is not a list of numbers (fix: [] when no error was measured)")
        space = data.get("space")
        if space is not None and not isinstance(space, str):
            raise bad("space", space, "is not a path (fix: a search-space file, or null)")
        if any(defaults[k] <= 0 for k in names):
            key = next(k for k in names if defaults[k] <= 0)
            raise bad(
                f"defaults.{key}", defaults[key], "is not > 0 (fix: the engine's value, e.g. block_size 128)"
            )
        return cls(
            machine=data["machine"],
            model=data["model"],
            engine=data["engine"],
            costs=EngineCosts.from_dict(costs),
            errors=tuple(float(e) for e in errors),
            defaults=EngineDefaults(**{k: int(defaults[k]) for k in names}),
            space=space,
        )


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _numbers(obj: Any, names: Sequence[str], optional: set[str], where: str, bad: Any) -> dict[str, Any]:
    """``obj`` as a mapping of the numbers ``names`` (>= 0; ``optional`` ones may be null or absent)."""
    if not isinstance(obj, Mapping):
        raise bad(where, obj, f"is not an object (fix: {{{', '.join(names)}}})")
    if unknown := sorted(set(obj) - set(names)):
        raise bad(f"{where}.{unknown[0]}", obj[unknown[0]], f"is not a key of {where} (fix: remove it)")
    out: dict[str, Any] = {}
    for name in names:
        value: Any = obj.get(name)
        if value is None and name in optional:
            out[name] = None if name != "requests" else 0
            continue
        if not _finite(value) or float(value) < 0:
            raise bad(f"{where}.{name}", value, "is not a number >= 0 (fix: the value the study fitted)")
        out[name] = value
    return out
