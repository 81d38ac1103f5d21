"""Search spaces as data: the validated model of ``search_spaces/*.yaml``.

A space lists parameters. Each is tunable (int, float, categorical, bool) or declared
``unsupported`` with the reason, and says how it reaches vLLM: a command-line ``flag``, an
environment variable ``env``, or a field of a JSON-valued flag (``json_flag`` + ``json_path``).
``condition`` makes a parameter depend on another one.

A parameter may also carry ``render:``, one :class:`RenderTarget` per engine profile (how the
same tuned value reaches that engine: another flag, a connector's JSON field, or ``unsupported``
with the reason). :func:`autotune.space.apply_profile` resolves those into plain parameters,
so everything downstream sees one target per parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.space._roles import Role, RoleNames, legacy_roles

__all__ = ["PROFILE_NAMES", "Condition", "FixedBy", "Parameter", "ProfileName", "RenderTarget", "SearchSpace"]

Scalar = int | float | str | bool
# Engine profiles a ``render:`` mapping may name (see autotune/engine/_profiles.py).
ProfileName = Literal["ascend", "cpu", "cuda-lmcache", "cuda-native"]
PROFILE_NAMES: tuple[str, ...] = ("ascend", "cpu", "cuda-lmcache", "cuda-native")
# A dotted path (``a.b.c``) or a list of keys, for keys that contain dots (``lmcache.chunk_size``).
JsonPath = str | tuple[str, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def json_keys(path: JsonPath) -> tuple[str, ...]:
    return tuple(path.split(".")) if isinstance(path, str) else tuple(path)


def _check_target(
    flag: str | None, env: str | None, json_flag: str | None, json_path: JsonPath | None, *, required: bool
) -> None:
    given = sum(x is not None for x in (flag, env, json_flag))
    if given > 1 or (required and given == 0):
        raise ValueError("give exactly one of 'flag', 'env' or 'json_flag' (with 'json_path')")
    if (json_flag is None) != (json_path is None):
        raise ValueError("'json_flag' and 'json_path' go together")
    if json_path is not None and (not json_keys(json_path) or not all(json_keys(json_path))):
        raise ValueError(f"json_path {json_path!r} has an empty key")
    for name in (flag, json_flag):
        if name is not None and not name.startswith("--"):
            raise ValueError(f"flag {name!r} must start with '--'")


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


class FixedBy(_Strict):
    """Another way a user sets what a parameter tunes: a flag, or a field of a JSON-valued flag."""

    flag: str | None = None
    json_flag: str | None = None
    json_path: JsonPath | None = None
    divisor: float = Field(
        default=1.0, gt=0, description="the field's value / this = the parameter's (bytes -> GiB)"
    )

    @model_validator(mode="after")
    def _check(self) -> FixedBy:
        _check_target(self.flag, None, self.json_flag, self.json_path, required=True)
        return self


class RenderTarget(_Strict):
    """How a parameter reaches one engine profile: a target, or ``unsupported`` with the reason."""

    flag: str | None = None
    env: str | None = None
    json_flag: str | None = None
    json_path: JsonPath | None = None
    format: str | None = None
    json_base: dict[str, Any] | None = None
    off_value: Scalar | None = None
    unsupported: str | None = None

    @model_validator(mode="after")
    def _check(self) -> RenderTarget:
        if self.unsupported is not None:
            extra = [
                k
                for k in ("flag", "env", "json_flag", "json_path", "format", "json_base")
                if getattr(self, k)
            ]
            if extra:
                raise ValueError(f"an 'unsupported' entry takes no {', '.join(extra)}")
            return self
        _check_target(self.flag, self.env, self.json_flag, self.json_path, required=True)
        return self


class Parameter(_Strict):
    type: Literal["int", "float", "categorical", "bool"]
    # What the parameter is (autotune/space/_roles.py): how the prior, the guard and the report find it.
    role: Role | None = None
    description: str = ""
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Scalar, ...] | None = None
    # How the value reaches vLLM (one of flag / env / json_flag+json_path). With ``render``, this
    # is the default for profiles the mapping does not name; an unsupported parameter needs none.
    flag: str | None = None
    env: str | None = None
    json_flag: str | None = None
    json_path: JsonPath | None = None
    format: str | None = Field(default=None, description="Python format string for the value, e.g. '{}M'")
    off_value: Scalar | None = Field(default=None, description="value that renders nothing (feature off)")
    json_base: dict[str, Any] | None = Field(
        default=None, description="JSON object the json_path field is inserted into"
    )
    condition: Condition | None = None
    # vLLM's own default (reported next to tuned values; the baseline trial omits the flag).
    default: Scalar | None = None
    unsupported: str | None = Field(default=None, description="why this platform cannot use it")
    render: dict[ProfileName, RenderTarget] | None = Field(
        default=None, description="per engine profile: how the value reaches that engine"
    )
    opt_in: str | None = Field(
        default=None,
        description="why it is off unless the user enables it (e.g. it changes numerics); printed with its value",
    )
    opted_in: bool = Field(default=False, description="an opt-in parameter the user enabled")
    fixed_by: tuple[FixedBy, ...] = Field(
        default=(),
        description="other flags or JSON fields that set the same thing (a user fixing one fixes it)",
    )
    # Set by :func:`autotune.space.fix_space`, not in a space file: why the user's fixed flags take it
    # out of the search ("fixed by you (--block-size 32)"), and the value they fix (None: unreadable,
    # or the parameter is off because of another fixed value).
    fixed: str | None = None
    fixed_value: Scalar | None = None

    @model_validator(mode="after")
    def _check(self) -> Parameter:
        _check_target(
            self.flag,
            self.env,
            self.json_flag,
            self.json_path,
            required=self.render is None and self.unsupported is None,
        )
        if self.type in ("int", "float"):
            self._check_range()
        elif self.type == "categorical":
            self._check_choices()
        elif self.type == "bool" and any(v is not None for v in (self.low, self.high, self.choices)):
            raise ValueError("type bool takes no low/high/choices")
        self._check_off_value()
        if self.opted_in and self.opt_in is None:
            raise ValueError("'opted_in' enables an 'opt_in' parameter; this one has no 'opt_in' reason")
        return self

    def _check_range(self) -> None:
        """An int or float parameter: low..high (integers for int), a log scale above 0 and without
        a step, no choices."""
        if self.low is None or self.high is None:
            raise ValueError(f"type {self.type} needs 'low' and 'high'")
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is greater than high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got low={self.low}")
        if self.log and self.step is not None:
            raise ValueError("'log' and 'step' cannot be combined (Optuna does not support it)")
        if self.type == "int" and (self.low != math.floor(self.low) or self.high != math.floor(self.high)):
            raise ValueError("type int needs integer 'low' and 'high'")
        if self.choices is not None:
            raise ValueError(f"type {self.type} takes low/high, not 'choices'")

    def _check_choices(self) -> None:
        """A categorical parameter: distinct choices, and no low/high/step."""
        if not self.choices:
            raise ValueError("type categorical needs a non-empty 'choices' list")
        if len(set(self.choices)) != len(self.choices):
            raise ValueError(f"'choices' has duplicates: {list(self.choices)}")
        if any(v is not None for v in (self.low, self.high, self.step)):
            raise ValueError("type categorical takes 'choices', not low/high/step")

    def _check_off_value(self) -> None:
        """The "feature off" value must be a candidate the sampler can propose."""
        off = self.off_value
        if off is None:
            return
        if self.choices is not None and off not in self.choices:
            raise ValueError(f"off_value {off!r} is not one of the choices {list(self.choices)} (add it)")
        low, high = self.low, self.high
        if low is None or high is None:
            return
        if not isinstance(off, int | float) or not low <= off <= high:
            raise ValueError(f"off_value {off!r} is outside low..high ({low:g}..{high:g})")

    def grid(self) -> list[Scalar]:
        """The values a search over this parameter would try: its choices, both booleans, or a range
        on its step (ten points when it has none)."""
        if self.type == "categorical" and self.choices:
            return list(self.choices)
        if self.type == "bool":
            return [True, False]
        if self.low is None or self.high is None:
            return []
        step = self.step or (self.high - self.low) / 9 or 1.0
        n = round((self.high - self.low) / step)
        vals = [self.low + i * step for i in range(n + 1)]
        return [round(v) if self.type == "int" else round(v, 6) for v in vals]

    @property
    def has_target(self) -> bool:
        return any(x is not None for x in (self.flag, self.env, self.json_flag))

    @property
    def json_keys(self) -> tuple[str, ...]:
        return json_keys(self.json_path) if self.json_path is not None else ()

    @property
    def tunable(self) -> bool:
        return (
            self.unsupported is None
            and self.fixed is None
            and self.has_target
            and (self.opt_in is None or self.opted_in)
        )

    @property
    def unsupported_reason(self) -> str | None:
        if self.unsupported is not None:
            return self.unsupported
        if self.opt_in is not None and not self.opted_in:
            return f"opt-in, off unless enabled ({self.opt_in})"
        if not self.has_target:
            profiles = ", ".join(self.render or {})
            return (
                f"renders only through an engine profile ({profiles}): resolve the space with apply_profile"
            )
        return None


def _with_role(p: dict[str, Any] | Parameter, role: Role) -> dict[str, Any] | Parameter:
    return {**p, "role": role} if isinstance(p, dict) else p.model_copy(update={"role": role})


class SearchSpace(_Strict):
    name: str
    platform: Literal["cuda", "cpu", "rocm", "xpu", "ascend"]
    description: str = ""
    parameters: Annotated[dict[str, Parameter], Field(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _legacy_roles(cls, data: Any) -> Any:
        """A parameter without ``role:`` under a pre-role name takes that name's role (when free)."""
        params = data.get("parameters") if isinstance(data, dict) else None
        if not isinstance(params, dict):
            return data

        def role_of(p: Any) -> Any:
            return p.get("role") if isinstance(p, dict) else getattr(p, "role", None)

        taken = [r for p in params.values() if (r := role_of(p)) is not None]
        unset = [n for n, p in params.items() if isinstance(p, dict | Parameter) and role_of(p) is None]
        inferred = legacy_roles(unset, taken)
        if not inferred:
            return data
        with_roles = {n: _with_role(p, inferred[n]) if n in inferred else p for n, p in params.items()}
        return {**data, "parameters": with_roles}

    @model_validator(mode="after")
    def _check_roles(self) -> SearchSpace:
        holders: dict[str, str] = {}
        for name, p in self.parameters.items():
            if p.role is None:
                continue
            if p.role in holders:
                raise ValueError(
                    f"parameters.{name}.role: role {p.role!r} is already parameter {holders[p.role]!r}'s "
                    "(fix: a role names one parameter; give one of them another role, or none)"
                )
            holders[p.role] = name
        return self

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
    def roles(self) -> RoleNames:
        """The name of the parameter with each role (tunable or not): ``space.roles.kv_pool``."""
        return RoleNames.of({p.role: n for n, p in self.parameters.items() if p.role is not None})

    def tunable_named(self, name: str | None) -> tuple[str, Parameter] | None:
        """(name, parameter) when ``name`` (e.g. ``space.roles.kv_pool``) is tuned, else None."""
        p = self.parameters.get(name) if name is not None else None
        return (name, p) if name is not None and p is not None and p.tunable else None

    @staticmethod
    def value_of(name: str | None, values: Mapping[str, Any], default: Any = None) -> Any:
        """What ``values`` (name -> value) give parameter ``name`` (None: the space lacks the role)."""
        return values.get(name, default) if name is not None else default

    @property
    def numerics_notes(self) -> dict[str, str]:
        """Enabled opt-in parameters with their reason (what the export and the report repeat)."""
        return {k: v.opt_in for k, v in self.parameters.items() if v.opt_in is not None and v.opted_in}

    def with_opt_in(self, names: Iterable[str]) -> SearchSpace:
        """This space with the named opt-in parameters enabled (``ValueError`` names a bad one and the fix)."""
        params = dict(self.parameters)
        offered = [k for k, v in params.items() if v.opt_in is not None]
        for name in names:
            p = params.get(name)
            if p is None or p.opt_in is None:
                what = (
                    "is not a parameter" if p is None else "is not an opt-in parameter (it is tuned already)"
                )
                raise ValueError(
                    f"opt-in {name!r} {what} of space {self.name!r} "
                    f"(fix: use one of: {', '.join(offered) or 'none; this space has no opt-in parameter'})"
                )
            params[name] = p.model_copy(update={"opted_in": True})
        return self.model_copy(update={"parameters": params})

    @property
    def unsupported(self) -> dict[str, str]:
        """Parameters this engine cannot tune, with the reason (those the user fixed: :attr:`fixed`)."""
        return {
            k: r
            for k, v in self.parameters.items()
            if v.fixed is None and (r := v.unsupported_reason) is not None
        }

    @property
    def fixed(self) -> dict[str, str]:
        """Parameters the user's fixed flags take out of the search, with why (``fixed by you (...)``)."""
        return {k: v.fixed for k, v in self.parameters.items() if v.fixed is not None}

    @property
    def fixed_values(self) -> dict[str, Scalar]:
        """The values the user fixed, in each parameter's own unit (where readable)."""
        return {k: v.fixed_value for k, v in self.parameters.items() if v.fixed_value is not None}
