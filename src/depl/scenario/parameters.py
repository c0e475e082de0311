"""The loss laws' own parameter tables: law name → the table it reads in every model version and switch.

The increments law's parameters (progress, noise, jump) are every scenario's (increments.py).  A law that reads
more registers its parameter models here, from a module of its own in this package (level.py):

    register_parameters("level", table="level", version=LevelLaw, switch=LevelSwitch, ...)

Each registered table becomes an optional field of `ModelVersion` and of `Switch`: model.py makes them from
this registry after importing every module that registers a table, so a new table registered later is refused
(another law reading a registered table is not).  Which tables a law needs is said where the law itself is
registered (depl.laws, `tables=`): a scenario naming the law without them is refused when it is read.  The
parameter models live here, below the laws (depl.loss imports the scenario).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field


@dataclass(frozen=True)
class LawParameters:
    """The table `table` of law `law`: a `version` model in every model version, a `switch` model in every switch."""

    law: str
    table: str
    version: type[BaseModel]
    switch: type[BaseModel]
    version_about: str
    switch_about: str


_BY_LAW: dict[str, LawParameters] = {}
_MADE: set[str] = set()  # the sides ("version", "switch") whose models were made from the tables registered then


def register_parameters(law: str, *, table: str, version: type[BaseModel], switch: type[BaseModel],
                        version_about: str, switch_about: str) -> LawParameters:
    """Make `table` a field of every model version (read as `version`) and switch (as `switch`) for `law`.  Laws
    may share a table (level and level-memory read `level`), with the same models only."""
    if _MADE and table not in {p.table for p in _BY_LAW.values()}:
        raise ValueError(f"the table {table!r} of {law!r} comes after the scenario's models were made: register it "
                         "in a module of depl.scenario that model.py imports (as level.py)")
    other = next((p for p in _BY_LAW.values() if p.table == table and p.law != law), None)
    if other is not None and (other.version, other.switch) != (version, switch):
        raise ValueError(f"the table {table!r} is read by {other.law!r} with other parameter models")
    _BY_LAW[law] = entry = LawParameters(law, table, version, switch, version_about, switch_about)
    return entry


def table_fields(side: Literal["version", "switch"]) -> dict[str, Any]:
    """The registered tables of a model version or a switch as optional pydantic fields, {table: (type, Field)},
    in the order they were registered."""
    _MADE.add(side)
    out: dict[str, Any] = {}
    for p in _BY_LAW.values():
        model, about = (p.version, p.version_about) if side == "version" else (p.switch, p.switch_about)
        out.setdefault(p.table, (model | None, Field(default=None, description=about)))
    return out
