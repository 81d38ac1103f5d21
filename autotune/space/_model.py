"""Search spaces as data: the validated model of ``search_spaces/*.yaml``.

A space lists parameters. Each is tunable (int, float, categorical, bool) or declared
``unsupported`` on the space's platform with the reason, and says how it reaches vLLM:
a command-line ``flag``, an environment variable ``env``, or a field of a JSON-valued flag
(``json_flag`` + ``json_path``). ``condition`` makes a parameter depend on another one.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Condition", "Parameter", "SearchSpace"]

Scalar = int | float | str | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Strict):
    """The parameter is sampled only when ``param`` satisfies every given test."""

    param: str
    equals: Scalar | None = None
    not_equals: Scalar | None = None
    greater_than: float | None = None
    one_of: tuple[Scalar, ...] | None = None

    def holds(self, value: Any) -> bool:
        if value is None:
            return False
        if self.equals is not None and value != self.equals:
            return False
        if self.not_equals is not None and value == self.not_equals:
            return False
        if self.greater_than is not None and not (
            isinstance(value, int | float) and value > self.greater_than
        ):
            return False
        return not (self.one_of is not None and value not in self.one_of)


class Parameter(_Strict):
    type: Literal["int", "float", "categorical", "bool"]
    description: str = ""
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Scalar, ...] | None = None
    # How the value reaches vLLM (exactly one of flag / env / json_flag+json_path).
    flag: str | None = None
    env: str | None = None
    json_flag: str | None = None
    json_path: str | None = None
    format: str | None = Field(default=None, description="Python format string for the value, e.g. '{}M'")
    off_value: Scalar | None = Field(default=None, description="value that renders nothing (feature off)")
    json_base: dict[str, Any] | None = Field(
        default=None, description="JSON object the json_path field is inserted into"
    )
    condition: Condition | None = None
    # vLLM's own default (reported next to tuned values; the baseline trial omits the flag).
    default: Scalar | None = None
    unsupported: str | None = Field(default=None, description="why this platform cannot use it")

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        targets = [self.flag is not None, self.env is not None, self.json_flag is not None]
        if sum(targets) != 1:
            raise ValueError("give exactly one of 'flag', 'env' or 'json_flag' (with 'json_path')")
        if (self.json_flag is None) != (self.json_path is None):
            raise ValueError("'json_flag' and 'json_path' go together")
        if self.flag is not None and not self.flag.startswith("--"):
            raise ValueError(f"flag {self.flag!r} must start with '--'")
        if self.type in ("int", "float"):
            if self.low is None or self.high is None:
                raise ValueError(f"type {self.type} needs 'low' and 'high'")
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
            if self.log and self.low <= 0:
                raise ValueError(f"log scale needs low > 0, got low={self.low}")
            if self.log and self.step is not None:
                raise ValueError("'log' and 'step' cannot be combined (Optuna does not support it)")
            if self.type == "int" and (
                self.low != math.floor(self.low) or self.high != math.floor(self.high)
            ):
                raise ValueError("type int needs integer 'low' and 'high'")
            if self.choices is not None:
                raise ValueError(f"type {self.type} takes low/high, not 'choices'")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("type categorical needs a non-empty 'choices' list")
            if len(set(self.choices)) != len(self.choices):
                raise ValueError(f"'choices' has duplicates: {list(self.choices)}")
            if any(v is not None for v in (self.low, self.high, self.step)):
                raise ValueError("type categorical takes 'choices', not low/high/step")
        elif self.type == "bool" and any(v is not None for v in (self.low, self.high, self.choices)):
            raise ValueError("type bool takes no low/high/choices")
        return self

    @property
    def tunable(self) -> bool:
        return self.unsupported is None


class SearchSpace(_Strict):
    name: str
    platform: Literal["cuda", "cpu", "rocm", "xpu", "ascend"]
    description: str = ""
    parameters: Annotated[dict[str, Parameter], Field(min_length=1)]

    @model_validator(mode="after")
    def _check_conditions(self) -> SearchSpace:
        names = list(self.parameters)
        for name, p in self.parameters.items():
            if p.condition is None:
                continue
            if p.condition.param not in self.parameters:
                raise ValueError(
                    f"parameters.{name}.condition.param: unknown parameter {p.condition.param!r} "
                    f"(known: {', '.join(names)})"
                )
            if names.index(p.condition.param) > names.index(name):
                raise ValueError(
                    f"parameters.{name}.condition: {p.condition.param!r} must be declared before {name!r}"
                )
        return self

    @property
    def tunable(self) -> dict[str, Parameter]:
        return {k: v for k, v in self.parameters.items() if v.tunable}

    @property
    def unsupported(self) -> dict[str, str]:
        return {k: v.unsupported for k, v in self.parameters.items() if v.unsupported is not None}
