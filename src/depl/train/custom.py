"""Your own network and data: ``MODULE:FUNCTION`` references in a scenario.

The convention is Flower's for app components: ``net = "mymodels:make_net"``
calls ``mymodels.make_net(**net_args)``; ``source = "mydata:load"`` calls
``mydata.load()``.  MODULE is imported from the scenario file's folder
(`Scenario.code_dir`), in every process that needs it (a Flower ClientApp
imports it on its node), and from nowhere else.

A plan file carries its scenario, and with it `code_dir` and every reference
with its arguments: a plan received from someone else must not make depl run
code from wherever it names.  So code is imported only from a folder the user
allowed (`code_roots`: ``$DEPL_CODE``, else the current folder, as for data),
never from the rest of the Python path (``net = "os:system"`` is not a
network), and FUNCTION must be defined in that code, not merely imported by it.

A data factory returns ``(train, test)``, each a ``torch.utils.data.Dataset``
of ``(x, y)`` pairs or a pair of tensors/arrays ``(X, y)``; it becomes a
`depl.train.data.Source` (float32 inputs, int64 class labels), so ``share``,
node shares and the test loss work as for the built-in sources.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .source import DataError, Source


def is_reference(text: str | None) -> bool:
    """Whether a scenario's `net` or `source` names user code rather than a built-in."""
    return bool(text) and ":" in str(text)


CODE_ENV = "DEPL_CODE"


class CodeRefused(DataError):
    """A folder of code the user did not allow depl to import from; the message says how to allow it."""


def code_roots() -> list[Path]:
    """The folders code may be imported from: $DEPL_CODE (several joined by ':'), else the current folder."""
    given = [x for x in os.environ.get(CODE_ENV, "").split(os.pathsep) if x.strip()]
    return [Path(x).expanduser().resolve() for x in given] or [Path.cwd().resolve()]


def trusted(code_dir: str | None) -> list[Path]:
    """The folders a reference's module is looked up in: `code_dir` (resolved) if it lies inside a
    code root, the roots themselves if there is none; CodeRefused otherwise."""
    roots = code_roots()
    if code_dir is None:
        return roots
    real = Path(code_dir).expanduser().resolve()
    if any(real == r or real.is_relative_to(r) for r in roots):
        return [real]
    shown = ", ".join(map(str, roots))
    unset = "" if os.environ.get(CODE_ENV, "").strip() else f" (the current folder: ${CODE_ENV} is unset)"
    raise CodeRefused(f"code_dir = {str(code_dir)!r} resolves to {real}, outside {shown}{unset}, the only place "
                      f"depl imports your networks and data from; if you trust the code there, set {CODE_ENV}={real}")


def _import(module: str, folders: list[Path]):
    """Import `module` from `folders` (allowed ones) only: a module of that name found there wins over
    one already imported from elsewhere (two scenarios may both have a `models.py`); DataError if none is."""
    top = module.split(".")[0]
    found, folder = next(((spec, str(f)) for f in folders
                          if (spec := importlib.machinery.PathFinder.find_spec(top, [str(f)])) is not None), (None, ""))
    if found is None:
        shown = ", ".join(map(str, folders))
        raise DataError(f"module {top!r} not found in {shown} (your code is imported from there only)")
    loaded = sys.modules.get(top)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None and loaded.__spec__.origin != found.origin:
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(folder)


def resolve(ref: str, code_dir: str | None):
    """The callable a ``MODULE:FUNCTION`` reference names; DataError (the reason) if there is none,
    CodeRefused if `code_dir` is not a folder the user allowed."""
    module, _, attr = str(ref).partition(":")
    if not module or not attr:
        raise DataError("expected MODULE:FUNCTION, e.g. mymodels:make_net")
    folders = trusted(code_dir)
    try:
        mod = _import(module, folders)
    except DataError:
        raise
    except Exception as e:  # the user's module failed while importing: say how
        raise DataError(f"importing {module!r} failed: {type(e).__name__}: {e}") from None
    if any(not part.isidentifier() or part.startswith("_") for part in attr.split(".")):
        raise DataError(f"{attr!r} is not a public name of module {module!r} (FUNCTION or CLASS.METHOD, no '_' names)")
    obj = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise DataError(f"module {module!r} ({getattr(mod, '__file__', '?')}) has no {attr!r}")
    if not callable(obj):
        raise DataError(f"{attr!r} of module {module!r} is a {type(obj).__name__}, not a function")
    # only what the user's code defines: `mymodels:os.system` reaches past it
    top = module.split(".")[0]
    owner = getattr(obj, "__module__", None) or type(obj).__module__
    if not isinstance(owner, str) or not (owner == top or owner.startswith(top + ".")):
        raise DataError(f"{attr!r} of module {module!r} is defined in {owner!r}, not in your code; depl calls only "
                        f"functions your modules define (write one in {module!r} that calls it)")
    return obj


def build_net(ref: str, args: dict[str, Any], code_dir: str | None):
    """FUNCTION(**net_args): a torch.nn.Module (DataError with the reason otherwise)."""
    from torch import nn

    factory = resolve(ref, code_dir)
    try:
        net = factory(**args)
    except Exception as e:
        raise DataError(f"calling it with net_args {args} failed: {type(e).__name__}: {e}") from None
    if not isinstance(net, nn.Module):
        raise DataError(f"it returned a {type(net).__name__}, not a torch.nn.Module")
    return net


def _arrays(part: Any, which: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) as float32 inputs and int64 labels, from a Dataset of pairs or a pair of tensors."""
    import torch
    from torch.utils.data import Dataset

    if isinstance(part, (tuple, list)) and len(part) == 2 and not isinstance(part, Dataset):
        xs, ys = part
        try:
            x = torch.as_tensor(np.asarray(xs) if not torch.is_tensor(xs) else xs)
            y = torch.as_tensor(np.asarray(ys) if not torch.is_tensor(ys) else ys)
        except (TypeError, ValueError, RuntimeError) as e:
            raise DataError(f"its {which} part is a pair but not of tensors (X, y): {e}") from None
    elif isinstance(part, Dataset):
        try:
            n = len(part)  # type: ignore[arg-type]
        except TypeError:
            raise DataError(f"its {which} Dataset has no len(); an iterable-style dataset cannot be sliced") from None
        if n == 0:
            raise DataError(f"its {which} Dataset is empty")
        items = [part[i] for i in range(n)]
        if not all(isinstance(it, (tuple, list)) and len(it) == 2 for it in items):
            raise DataError(f"its {which} Dataset does not yield (x, y) pairs (item 0 is {type(items[0]).__name__})")
        try:
            x = torch.stack([torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a) for a, _ in items])
            y = torch.as_tensor([int(b) for _, b in items])
        except (TypeError, ValueError, RuntimeError) as e:
            raise DataError(f"its {which} Dataset's items cannot be stacked into one tensor: {e}") from None
    else:
        raise DataError(f"its {which} part is a {type(part).__name__}; expected a torch Dataset of (x, y) pairs "
                        "or a pair of tensors (X, y)")
    if x.ndim < 2 or len(x) == 0:
        raise DataError(f"its {which} inputs have shape {tuple(x.shape)}; expected (samples, ...) with at least one sample")
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"its {which} labels have shape {tuple(y.shape)} for {len(x)} inputs; expected one class index per input")
    if y.is_floating_point() and not bool(torch.all(y == y.round())):
        raise DataError(f"its {which} labels are not whole numbers; depl trains classifiers (class indices 0..C-1)")
    y = y.to(torch.int64)
    if int(y.min()) < 0:
        raise DataError(f"its {which} labels include {int(y.min())}; class indices start at 0")
    return x.to(torch.float32).numpy(), y.numpy()


def load_source(ref: str, code_dir: str | None) -> Source:
    """FUNCTION() → (train, test) as a `Source` (DataError with the reason if it is not one)."""
    trusted(code_dir)  # checked on every call, not only on the first (cached) one
    return _load_source(ref, code_dir)


@lru_cache(maxsize=4)
def _load_source(ref: str, code_dir: str | None) -> Source:
    factory = resolve(ref, code_dir)
    try:
        out = factory()
    except Exception as e:
        raise DataError(f"calling it failed: {type(e).__name__}: {e}") from None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise DataError(f"it returned a {type(out).__name__}; expected (train, test)")
    xt, yt = _arrays(out[0], "train")
    xe, ye = _arrays(out[1], "test")
    if xt.shape[1:] != xe.shape[1:]:
        raise DataError(f"its train inputs have shape {xt.shape[1:]} but its test inputs {xe.shape[1:]}")
    n_classes = int(max(yt.max(), ye.max())) + 1
    return Source(np.ascontiguousarray(xt), yt, np.ascontiguousarray(xe), ye, n_classes)
