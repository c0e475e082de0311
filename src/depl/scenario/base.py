"""What every table of a scenario shares: the strict pydantic base (no unknown key, no NaN, no true/false for a
number, every number within ±MAGNITUDE), names without control characters, and the errors the boundary raises."""

from __future__ import annotations

import types
import typing
import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message is meant for the user."""


# Every number of a scenario lies within ±MAGNITUDE: beyond it the planners'
# sums of squares and cubes of progress overflow a float (1e308), and no
# physical quantity of a training system needs more than 12 decimal digits of
# range once its unit is chosen sensibly.
MAGNITUDE = 1e12


def _out_of_range(value: Any, where: str = "") -> str | None:
    """Why `value` (a number, or numbers in a dict/tuple/list) is not usable; None when it is."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if abs(value) > MAGNITUDE:
            return (f"{where}{value!r} is beyond ±{MAGNITUDE:g}; depl's arithmetic overflows there "
                    "(choose units in which the numbers are smaller)")
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (tuple, list)) else ()
    for k, v in items:
        why = _out_of_range(v, f"{k} = " if isinstance(value, dict) else f"[{k}] = ")
        if why:
            return why
    return None


def control_character(text: str) -> str | None:
    """The first control character (a newline, a tab, an escape, …: Unicode category Cc) of `text`, or None."""
    return next((c for c in text if unicodedata.category(c) == "Cc"), None)


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a scenario, a cluster, a dataset or a model version; None when it can.  A control
    character would break the one-line messages, the tables and the TOML files that carry the name."""
    c = control_character(name)
    if c is not None:
        return f"a name holds no control character (newline, tab, …); found {c!r}"
    return None


def plain_name(v: str) -> str:
    """A validator: `v` when it can name something (`name_problem`)."""
    why = name_problem(v)
    if why:
        raise ValueError(why)
    return v


def _numeric(annotation: Any) -> bool:
    """Whether a field holds numbers only (int, float, and lists, tuples, dicts and optionals of them)."""
    if annotation in (int, float):
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is dict:
        return len(args) == 2 and _numeric(args[1])
    return origin in (list, tuple, typing.Union, types.UnionType) and bool(args) and \
        all(a is Ellipsis or _numeric(a) for a in args)


def _has(value: Any, kind: type) -> bool:
    """Whether `value`, or a value among its lists, tuples and dict values, is a `kind`."""
    if isinstance(value, kind):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has(x, kind) for x in value)
    return isinstance(value, dict) and any(_has(x, kind) for x in value.values())


class Strict(BaseModel):
    # allow_inf_nan=False: NaN and ±inf are refused in every float, dict and tuple of floats
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic reads true/false as 1/0 and the text "60000" as 60000 where a number is expected (lax mode, which
        # ints in TOML need).  Only a field of numbers is scanned: a nested model's values are checked by its own fields
        if not _numeric(cls.model_fields[info.field_name].annotation):
            return v
        if _has(v, bool):
            raise ValueError("expected a number, not true/false" if isinstance(v, bool) else
                             "expected numbers, got true/false among them")
        if _has(v, str):
            raise ValueError(f"expected a number, not the text {v!r} (a number is written without quotes)"
                             if isinstance(v, str) else "expected numbers, got text among them")
        return v

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, v: Any) -> Any:
        why = _out_of_range(v)
        if why:
            raise ValueError(why)
        return v


class FieldError(ValueError):
    """A cross-field error that knows its field path (raised inside validators)."""

    def __init__(self, loc: str, value: Any, why: str):
        super().__init__(f"{loc} = {value!r}: {why}")
        self.loc, self.value, self.why = loc, value, why
