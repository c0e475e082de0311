"""Reading a scenario's (or a plan's) text: TOML parsed with one-line errors, nesting refused before a parser
recurses too deep, and pydantic's first error said as one line naming the file, the field, the value and why."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from pydantic import ValidationError

from .base import FieldError, ScenarioError

# Scenario and plan documents nest a few levels (a plan's scenario_spec.calibration.epoch_scores: 5); Python's
# parsers and pydantic recurse once per level, and a document nested thousands deep stops them with a RecursionError.
MAX_NESTING = 32
# Python reads at most 4300 digits of a whole number (sys.get_int_max_str_digits); no field takes such a number.
_HUGE_INTEGER = re.compile(r"[0-9][0-9_]{4300,}")


def too_deep(data: Any, limit: int = MAX_NESTING) -> str | None:
    """The path (`models[0].train.net_args.a`) of the first value of `data` nested more than `limit` lists or
    tables deep, found without recursion; None when there is none."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        v, where, depth = stack.pop()
        if isinstance(v, dict):
            items = [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            items = [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        else:
            continue
        if depth >= limit:
            return where or "the document"
        stack.extend((x, w, depth + 1) for w, x in reversed(items))
    return None


def unreadable_text(text: str, source: str, e: Exception, kind: str, what: str) -> str:
    """One line saying why `text` (TOML or JSON) could not be parsed: where an integer is too long for Python or
    the nesting too deep for its parser, the line and the key; else the parser's own message."""
    if isinstance(e, ValueError) and "digits" in str(e):
        m = _HUGE_INTEGER.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            head = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
            named = re.search(r'"((?:[^"\\]|\\.)*)"\s*:\s*\[?\s*$' if kind == "JSON" else r"([\w.\-\"']+)\s*=\s*\[?\s*$",
                              head)
            key = named.group(1) if named else "a value"
            return (f"{source}: line {line}: {key} = an integer of {len(m.group().replace('_', ''))} digits: Python "
                    "reads at most 4300 digits of a number, and no field takes one so large")
    if isinstance(e, RecursionError):
        depth, line = 0, 1
        for c in text:
            if c == "\n":
                line += 1
            elif c in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    break
            elif c in "]}":
                depth -= 1
        where = f"line {line}: " if depth > MAX_NESTING else ""
        return (f"{source}: {where}lists or tables nested too deep to be read (a {what} nests a few levels; "
                f"{MAX_NESTING} at most)")
    return f"{source}: not valid {kind}: {e}"


def read_toml(text: str, source: str) -> dict:
    """The TOML document `text` (read from `source`); ScenarioError in one line when it cannot be parsed — invalid
    TOML, an integer of more digits than Python reads, tables nested deeper than its parser recurses."""
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:  # TOMLDecodeError is a ValueError; so is int()'s digit limit
        raise ScenarioError(unreadable_text(text, source, e, "TOML", "scenario")) from None


def shown_value(value: Any, width: int = 80) -> str:
    """`value` as a message shows it: its repr, cut to `width` characters (a 4000-digit number stays one line)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4300 digits has no repr
        return "<an integer of more than 4300 digits>"
    return text if len(text) <= width else text[:width - 3] + "..."


def _format_loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _lookup(data: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _name_hint(data: dict, loc: tuple) -> str:
    """' (models[1] is "intermediate")' — so a user finds the entry."""
    if len(loc) >= 2 and isinstance(loc[1], int):
        entry = _lookup(data, loc[:2])
        if isinstance(entry, dict) and "name" in entry:
            name = entry["name"]
            # a name as JSON writes it: in double quotes, any newline or control character escaped, so the message
            # stays one line whatever the name holds
            shown = json.dumps(name, ensure_ascii=False) if isinstance(name, str) else shown_value(name)
            return f" ({_format_loc(loc[:2])} is {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return ""


def validation_error(e: ValidationError, data: dict, source: str) -> ScenarioError:
    """The first of pydantic's errors on scenario `data` (read from `source`) as one line."""
    err = e.errors(include_url=False)[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    ctx_err = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_err, FieldError):
        return ScenarioError(f"{source}: {ctx_err.loc} = {shown_value(ctx_err.value)}: {ctx_err.why}")
    msg = err["msg"].removeprefix("Value error, ")
    field = _format_loc(loc)
    if err["type"] == "missing":
        return ScenarioError(f"{source}: {field}: this field is required{_name_hint(data, loc)}")
    if err["type"] == "extra_forbidden":
        return ScenarioError(f"{source}: {field}: unknown field{_name_hint(data, loc)}; see docs/scenario-format.md for the keys")
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" = {shown_value(value)}"
    more = f"; {len(e.errors())-1} more error(s) after this one" if len(e.errors()) > 1 else ""
    return ScenarioError(f"{source}: {field}{shown}: {msg}{_name_hint(data, loc)}{more}")
