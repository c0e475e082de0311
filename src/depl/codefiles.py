"""Where the code a ``MODULE:FUNCTION`` reference names lives, found without running any of it.

Importing a module runs it, so everything a scenario or plan says about code
is checked on files first (`module_files`: the package ``__init__.py`` files
and the module file that importing it would execute, found the way
``importlib`` finds them, but without executing anything), and each file is
pinned by its content (`digest`).  `installed_folder` tells a user's code
from code Python keeps for itself — the standard library, site-packages, a
virtual environment — which a folder the user allowed may contain but does
not thereby allow (a project folder holds its ``.venv``).

Planning reads these files (a plan records their digests) but imports nothing:
this module needs only the standard library.  The policy — which folders are
allowed, what is refused and how it is said — is depl.train.task.custom's.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import re
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES)  # ('.py',)
_STDLIB_NAME = re.compile(r"python\d+(\.\d+)?t?")  # lib/python3.11: a standard library's folder (POSIX layout)


class NotFound(LookupError):
    """The module is not in the folder (or a package on the way is not one); the message says which part."""


def module_files(module: str, folder: Path) -> list[Path]:
    """The files importing `module` from `folder` would execute, outermost first: each regular package's
    ``__init__.py`` on the way and the module's own file (a namespace package has none), symlinks resolved.
    Nothing is imported: `importlib.machinery.PathFinder` only looks at the folder.  NotFound otherwise."""
    parts = module.split(".")
    search = [str(folder)]
    files: list[Path] = []
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            where = folder if i == 0 else f"package {'.'.join(parts[:i])!r}"
            raise NotFound(f"module {name!r} not found in {where}")
        if spec.has_location and spec.origin:
            files.append(Path(spec.origin).resolve())
        if i + 1 < len(parts):
            if spec.submodule_search_locations is None:
                raise NotFound(f"{name!r} is a module, not a package: it has no {parts[i + 1]!r}")
            search = [str(p) for p in spec.submodule_search_locations]
    return files


def top_level_names(path: Path) -> set[str] | None:
    """The names a module file binds at its top level (def, class, assignment, import, …), read without running
    it; None where reading cannot tell (``from X import *``, ``globals()``, ``setattr``, a module ``__getattr__``).
    Statements other than def and class are read whole: a name bound anywhere in them counts (more, never fewer)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        for n in ast.walk(node):
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names):
                return None
            if isinstance(n, ast.Name) and n.id in ("globals", "setattr", "vars", "exec"):
                return None
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in n.names)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
    return None if "__getattr__" in names else names


def digest(path: Path) -> str:
    """``sha256:HEX`` of a file's bytes."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def file_digests(files: list[Path], folder: Path) -> dict[str, str]:
    """``{path: sha256}`` of `files`, each named by its path in `folder` (absolute if it lies elsewhere): the
    keys a plan's `code_hashes` records and running it compares."""
    return {(f.relative_to(folder).as_posix() if f.is_relative_to(folder) else str(f)): digest(f) for f in files}


@lru_cache(maxsize=1)
def _interpreter_folders() -> tuple[Path, ...]:
    """The folders of this Python's own installation: its prefixes and sysconfig's library folders."""
    paths = sysconfig.get_paths()
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             *(paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib"))}
    return tuple(sorted({Path(p).resolve() for p in found if p}))


def installed_folders(path: Path) -> list[Path]:
    """Every folder above `path` (resolved), innermost first, that holds installed or standard Python code:
    this interpreter's prefixes and library folders, any ``site-packages``/``dist-packages``, a virtual
    environment (``pyvenv.cfg``), a conda environment (``conda-meta``), a ``lib/pythonX.Y`` standard library."""
    own = _interpreter_folders()
    return [a for a in path.parents
            if a.name in ("site-packages", "dist-packages") or a in own
            or (_STDLIB_NAME.fullmatch(a.name) is not None and a.parent.name in ("lib", "lib64"))
            or (a / "pyvenv.cfg").is_file() or (a / "conda-meta").is_dir()]


def allows_installed(root: Path, path: Path) -> bool:
    """Whether `root` (a folder the user allowed) allows the file at `path` as far as installed code goes:
    always for a file in no installed folder; otherwise only when the user named a folder strictly inside
    every installed folder that holds it (a package of site-packages, say) — not a folder that merely
    contains one (a project folder holding its ``.venv``), nor site-packages or the standard library whole."""
    return all(root != a and root.is_relative_to(a) for a in installed_folders(path))
