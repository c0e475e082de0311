"""Paths in the files depl writes for others to read: plans, model sidecars, certificates, reports.

A file made on one machine must work from any copy of its folder (a clone of a repository, a folder sent
whole), so a path another of depl's commands follows is recorded relative to the folder of the file that
records it (`relative`) and taken from that folder when read (`resolved`); a path that only says where
something was (a cache, the α ledger of the machine, the store a header names) is recorded as `informational`:
never an absolute path of this machine.
"""

from __future__ import annotations

import os
from pathlib import Path


def relative(path: str | os.PathLike, file: str | os.PathLike) -> str:
    """`path` (absolute, or relative to the current folder) as recorded in `file`: relative to `file`'s folder,
    with '/' between parts, "." for the folder itself."""
    return Path(os.path.relpath(Path(path).resolve(), Path(file).resolve().parent)).as_posix()


def relative_files(values: dict, keys: tuple[str, ...], file: str | os.PathLike) -> dict[str, str]:
    """Those of `keys` whose value in `values` names a file of this machine (a string, neither an in-memory store
    nor a URL), as `file` records them (`relative`): for `dict.update` or `Certificate.with_evidence`."""
    return {k: relative(values[k], file) for k in keys
            if isinstance(values.get(k), str) and values[k] != ":memory:" and "://" not in values[k]}


def resolved(value: str, file: str | os.PathLike) -> Path:
    """A path `file` records (`relative`), as a path of this machine: taken from `file`'s folder (an absolute
    one, which someone wrote by hand, as it is)."""
    return (Path(file).resolve().parent / value).resolve()


def informational(path: str | os.PathLike) -> str:
    """Where something lies, said for a reader and followed by nothing: a relative path as it was given; one in
    the home folder as ~/…; any other absolute path by its last two parts (…/folder/name), which say what it was
    without this machine's layout."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    home = Path.home()
    if p.is_relative_to(home):
        return "~/" + p.relative_to(home).as_posix()
    return "…/" + "/".join(p.parts[-2:])
