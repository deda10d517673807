"""The schema of the params/ files, declared beside the code that reads them: a section of a file is a frozen
dataclass (``@section``) whose field annotations pydantic validates (the type, then the key's checks: allowed values,
range, device, per arm); ``validate`` turns pydantic's first error into a ParamError naming the file, the dotted key
and what is allowed. A profile key's ``setting(default, compared=..., grows_only=...)`` says how a run's identity
treats it.

Types are strict (YAML's ``on`` is a boolean, not a string), except that a number written ``3e-3`` (a string in
YAML 1.1) is a Float and a list given for a Tuple key becomes a tuple.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

from pydantic import AfterValidator, AllowInfNan, BeforeValidator, ConfigDict, Strict, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from .paths import ParamError

TYPE, CHECK = "normgrow_type", "normgrow_check"
"""The error kinds the checks raise: a value of another type, a value its check refuses (validate)."""


def refuse(value: Any, says: str) -> PydanticCustomError:
    """The error of a value its check refuses: ``key=value says`` (says: 'must be > 0', 'is not allowed; ...')."""
    return PydanticCustomError(CHECK, "{says}", {"value": value, "says": says})


def _number_from_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _tuple_from_list(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


Int = Annotated[int, Strict()]
Float = Annotated[float, BeforeValidator(_number_from_text), Strict(), AllowInfNan(False)]
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Tuple = Annotated[tuple, BeforeValidator(_tuple_from_list), Strict()]


def in_range(says: str, test: Callable[[Any], bool]) -> AfterValidator:
    def check(value):
        if not test(value):
            raise refuse(value, f"must be {says}")
        return value
    return AfterValidator(check)


POSITIVE = in_range("> 0", lambda v: v > 0)
NON_NEGATIVE = in_range(">= 0", lambda v: v >= 0)
UNIT_INTERVAL = in_range("in [0, 1]", lambda v: 0 <= v <= 1)
AT_LEAST_ONE = in_range("an integer >= 1", lambda v: v >= 1)
AT_LEAST_ZERO = in_range("an integer >= 0", lambda v: v >= 0)
"""The ranges several keys share."""


@dataclass(frozen=True)
class OneOf:
    """Allowed values: a tuple, or a function returning them (a registry of components, imported on first use)."""
    values: tuple | Callable[[], tuple]

    def allowed(self) -> tuple:
        return self.values() if callable(self.values) else self.values

    def __call__(self, value):
        if value not in self.allowed():
            raise refuse(value, f"is not allowed; allowed values: {', '.join(self.allowed())}")
        return value


def one_of(values) -> AfterValidator:
    return AfterValidator(OneOf(values))


def _device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|mps|cuda(:[0-9]+)?", value):
        raise refuse(value, "is not a device; allowed values: auto, cpu, cuda, cuda:N, mps")
    return value


Device = Annotated[Str, AfterValidator(_device)]  # auto | cpu | mps | cuda | cuda:N


@dataclass(frozen=True)
class PerArm:
    """One value, or a mapping of placement -> value or mapping of schedule -> value (train.spec.for_arm resolves
    it for a run, where the placements and schedules are defined): the value's type, its range as an error says it,
    its test, an example mapping."""
    kind: type
    says: str
    test: Callable[[Any], bool]
    example: str

    def __call__(self, value):
        if isinstance(value, dict) and value:
            return {str(k): self(v) for k, v in value.items()}
        if self.kind is float and isinstance(value, (int, str)) and not isinstance(value, bool):
            value = _number_from_text(value) if isinstance(value, str) else float(value)
        if not isinstance(value, self.kind) or isinstance(value, bool):
            raise PydanticCustomError(TYPE, "{says}", {"value": value, "says": self.kind.__name__})
        if not self.test(value):
            raise refuse(value, f"must be {self.says} (one value, or a mapping like {self.example})")
        return value


def per_arm(kind: type, says: str, test: Callable[[Any], bool], example: str) -> AfterValidator:
    return AfterValidator(PerArm(kind, says, test, example))


POSITIVE_FINITE = ("> 0 and finite", lambda v: math.isfinite(v) and v > 0)


@dataclass(frozen=True)
class Rule:
    """What a run makes of a key beside its value: part of a run's identity (a run recorded under another value is
    another run), read only by a run that grows (a joint or single run records its default), given per arm, and
    the allowed values its annotation checks (None: any value of its type)."""
    compared: bool = True
    grows_only: bool = False
    per_arm: bool = False
    choices: OneOf | None = None

    def allowed(self) -> tuple | None:
        return self.choices.allowed() if self.choices else None


def setting(default: Any, *, compared: bool = True, grows_only: bool = False) -> Any:
    """A dataclass field with this default and how a run's identity treats it (Rule)."""
    return field(default=default, metadata={"compared": compared, "grows_only": grows_only})


def rule_of(f, annotation: Any) -> Rule:
    """The Rule of a dataclass field: its setting() flags and the checks its (resolved) annotation carries."""
    checks = [getattr(m, "func", None) for m in getattr(annotation, "__metadata__", ())]
    return Rule(compared=f.metadata.get("compared", True), grows_only=f.metadata.get("grows_only", False),
                per_arm=any(isinstance(c, PerArm) for c in checks),
                choices=next((c for c in checks if isinstance(c, OneOf)), None))


def section(cls):
    """A frozen dataclass that pydantic validates refusing unknown keys."""
    cls.__pydantic_config__ = ConfigDict(extra="forbid")
    return dataclass(frozen=True)(cls)


@functools.cache
def _adapter(cls) -> TypeAdapter:
    return TypeAdapter(cls)


def validate(cls, raw: Any, where: str = ""):
    """raw (a file's mapping) as cls, validated; pydantic's first error (fields in their declared order) as one
    ParamError: ``<where>: <dotted key>...`` with the allowed keys, values or range, or the type expected."""
    try:
        return _adapter(cls).validate_python(raw)
    except ValidationError as err:
        raise ParamError(f"{where}: {_message(cls, err.errors()[0])}" if where else _message(cls, err.errors()[0])
                         ) from None


def _message(cls, e: dict) -> str:
    loc, kind, ctx = e["loc"], e["type"], e.get("ctx") or {}
    key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    value = ctx.get("value", e["input"])
    for part in loc[:-1] if kind in ("unexpected_keyword_argument", "missing", "missing_argument") else ():
        cls = typing.get_args(cls)[0] if isinstance(part, int) else typing.get_type_hints(cls)[part]
    if kind == "unexpected_keyword_argument":
        allowed = ", ".join(f.name for f in dataclasses.fields(cls))
        return f"unknown key {key if len(loc) > 1 else repr(key)}; allowed keys: {allowed}"
    if kind in ("missing", "missing_argument"):
        required = [f.name for f in dataclasses.fields(cls) if f.default is f.default_factory is dataclasses.MISSING]
        return f"missing key {key!r}; required keys: {', '.join(required)}"
    if kind == CHECK:
        return f"{key}={value!r} {ctx['says']}"
    if kind == "finite_number":
        return f"{key}={value!r} must be a finite number"
    if kind in ("dataclass_type", "dataclass_args_type"):
        return f"{key}: expected a mapping, got {value!r}" if key else f"expected a mapping, got {value!r}"
    expected = ctx["says"] if kind == TYPE else {"string_type": "str", "dict_type": "a mapping", "list_type": "a list"}.get(kind, kind.removesuffix("_type"))
    hint = (f" (YAML reads an unquoted on, off, yes or no as a boolean: write {key}: \"{'on' if value else 'off'}\")"
            if expected == "str" and isinstance(value, bool) else "")
    return f"{key}: expected {expected}, got {value!r}{hint}"
