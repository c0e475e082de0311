"""Your own network and data: ``MODULE:FUNCTION`` references in a scenario.

The convention is Flower's for app components: ``net = "mymodels:make_net"``
calls ``mymodels.make_net(**net_args)``; ``source = "mydata:load"`` calls
``mydata.load()``.  MODULE is imported from the scenario file's folder
(`Scenario.code_dir`), in every process that needs it (a Flower ClientApp
imports it on its node), and from nowhere else.

A plan file carries its scenario, and with it `code_dir` and every reference
with its arguments: a plan received from someone else must not make depl run
code from wherever it names (the ecosystem's ``trust_remote_code=False``).  So:

* code is imported only from folders the user allowed on this machine
  (`code_roots`: ``$DEPL_CODE``, extended by a command's ``--allow-code DIR``)
  — never by the scenario or plan itself, nor by the current folder (a
  scenario, a plan and a kept model record ``code_dir`` relative to their
  own file and are read so, depl.paths; a relative ``code_dir`` given to
  these functions is taken from the allowed folders);
* before anything is imported, the files the import would run are found
  (`depl.codefiles`) and each must be Python source inside an allowed folder
  (symlinks followed) and not installed code — the standard library,
  site-packages, a virtual environment — unless the user allowed a folder
  inside it by name (`locate`);
* FUNCTION must be defined in the named module's file (its ``__module__`` and
  its file), not merely importable from it;
* a plan records the digest of every such file (`Scenario.code_hashes`), and
  running it with other code is refused (`check_code`).

docs/security.md says what is trusted, by whom, and how to share a plan.

A data factory returns ``(train, test)``, each a ``torch.utils.data.Dataset``
of ``(x, y)`` pairs or a pair of tensors/arrays ``(X, y)``; it becomes a
`depl.train.task.data.Source` (float32 inputs; int64 class labels, or float32
targets of shape (n,) or (n, d) for a regression loss: `source.fit_targets`),
so ``share``, node shares and the test loss work as for the built-in sources.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import os
import shlex
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ... import codefiles
from .source import DataError, Source, fit_targets, outputs, targets_of


def is_reference(text: str | None) -> bool:
    """Whether a scenario's `net` or `source` names user code rather than a built-in."""
    return bool(text) and ":" in str(text)


CODE_ENV = "DEPL_CODE"


class CodeRefused(DataError):
    """Code depl will not import: not in a folder the user allowed, installed rather than the user's, or not the
    code a plan was made with.  The message says why and how to allow it; `folder` is the folder to allow."""

    def __init__(self, message: str, folder: Path | None = None):
        super().__init__(message)
        self.folder = folder


def code_roots() -> list[Path]:
    """The folders the user allowed code to be imported from on this machine: $DEPL_CODE (several joined by
    ':'), which `--allow-code DIR` extends for one command.  None by default: a scenario or a plan never
    allows its own code, and neither does the folder a command happens to run in."""
    given = [x for x in os.environ.get(CODE_ENV, "").split(os.pathsep) if x.strip()]
    return [Path(x).expanduser().resolve() for x in given]


_COMMAND: list[str] | None = None  # the command line that allowed code (`allow(..., command=...)`), for how_to_allow


def allow(folders, command=None) -> None:
    """Allow `folders` (a command's --allow-code) for this process and every process it starts (seed
    workers, Flower's SuperLink and ClientApps): they are added to $DEPL_CODE.  `command`: the command line
    being run (["depl", "run", …], given by the command line that knows it), which a refusal then repeats
    with --allow-code FOLDER; None leaves the one given before."""
    global _COMMAND
    if command is not None:
        _COMMAND = [str(x) for x in command]
    extra = [str(Path(f).expanduser().resolve()) for f in folders or ()]
    if extra:
        old = [x for x in os.environ.get(CODE_ENV, "").split(os.pathsep) if x.strip()]
        os.environ[CODE_ENV] = os.pathsep.join(dict.fromkeys([*old, *extra]))


def how_to_allow(folder: Path, command=None) -> str:
    """How to allow `folder`: `command` (a command line; default: the one `allow` was given) again with
    --allow-code FOLDER, or in words where none is known (a call from Python)."""
    command = _COMMAND if command is None else list(command)
    if command:
        cmd = shlex.join([*command, "--allow-code", str(folder)])
    else:
        cmd = f"the same depl command with --allow-code {shlex.quote(str(folder))}"
    return f"if you trust the code there, run {cmd} (or export {CODE_ENV}={shlex.quote(str(folder))})"


def _refused(why: str, folder: Path) -> CodeRefused:
    return CodeRefused(f"{why}; {how_to_allow(folder)}", folder)


def code_folders(code_dir: str | None) -> list[tuple[Path, Path]]:
    """The folders a reference's module is looked up in, each with the allowed root it lies in: `code_dir`
    if it resolves (symlinks followed) inside a root — a relative one is taken from each root, never from the
    current folder —; the roots themselves if there is no code_dir.  CodeRefused otherwise."""
    roots = code_roots()
    if code_dir is not None and not Path(code_dir).is_absolute():
        inside = [((r / code_dir).resolve(), r) for r in roots]
        found = [(f, r) for f, r in inside if f.is_relative_to(r) and f.is_dir()]
        if found:
            return found[:1]
        if not roots:
            raise CodeRefused(f"code_dir = {code_dir!r}: no folder of code is allowed on this machine, and a "
                              f"relative code_dir is looked up in those only (--allow-code DIR, ${CODE_ENV})")
        raise CodeRefused(f"code_dir = {code_dir!r}: no such folder inside the folders you allowed "
                          f"({', '.join(map(str, roots))})")
    if code_dir is None:
        if not roots:
            raise CodeRefused(f"no folder of code is allowed on this machine: allow the folder of your code with "
                              f"--allow-code DIR (or export {CODE_ENV}=DIR)")
        return [(r, r) for r in roots]
    real = Path(code_dir).resolve()
    if not real.is_dir():
        raise CodeRefused(f"code_dir = {str(code_dir)!r}: no such folder")
    root = next((r for r in roots if real.is_relative_to(r)), None)
    if root is None:
        where = f"code_dir = {str(code_dir)!r}" + (f" (resolved: {real})" if str(real) != str(code_dir) else "")
        shown = (f"is outside the folders you allowed ({', '.join(map(str, roots))})" if roots
                 else f"is not allowed: no folder of code is allowed on this machine (--allow-code, ${CODE_ENV})")
        raise _refused(f"{where} {shown}", real)
    return [(real, root)]


def split_reference(ref: str) -> tuple[str, str]:
    """MODULE:FUNCTION → (module, attribute path); DataError if it is not one, or names a private part."""
    module, _, attr = str(ref).partition(":")
    if not module or not attr:
        raise DataError("expected MODULE:FUNCTION, e.g. mymodels:make_net")
    if any(not part.isidentifier() for part in module.split(".")):
        raise DataError(f"{module!r} is not a module name (dotted identifiers, e.g. mypackage.models)")
    if any(not part.isidentifier() or part.startswith("_") for part in attr.split(".")):
        raise DataError(f"{attr!r} is not a public name of module {module!r} (FUNCTION or CLASS.METHOD, no '_' names)")
    return module, attr


def locate(ref: str, code_dir: str | None) -> tuple[Path, list[Path]]:
    """The folder a reference's module is found in and the files importing it would run (package
    ``__init__.py`` files, then the module's), each checked — before anything is imported — to be a Python
    source file inside an allowed root (symlinks followed) and not installed code the user did not name.
    DataError (not found) or CodeRefused (not allowed) otherwise."""
    module, _ = split_reference(ref)
    folders = code_folders(code_dir)
    misses = []
    for folder, root in folders:
        try:
            files = codefiles.module_files(module, folder)
        except codefiles.NotFound as e:
            misses.append(str(e))
            continue
        for f in files:
            if not f.is_relative_to(root):
                raise _refused(f"module {module!r}: {f} lies outside the folder you allowed ({root}): "
                               "a symlink out of it", f.parent)
            if f.suffix not in codefiles.SOURCE_SUFFIXES:
                raise CodeRefused(f"module {module!r}: {f} is not Python source (.py); depl imports your code "
                                  "from source files only, whose digest a plan records")
            if not codefiles.allows_installed(root, f):
                held = codefiles.installed_folders(f)[-1]
                pkg = f.parent if f.parent != held else f
                raise _refused(f"importing module {module!r} runs {f}, installed code (in {held}), not yours; "
                               f"the folder you allowed ({root}) holds it but does not name it", pkg)
        if not files:
            raise CodeRefused(f"module {module!r} in {folder} is a namespace package: it has no file to run or pin")
        return folder, files
    shown = "; ".join(dict.fromkeys(misses)) or "nothing found"
    raise DataError(f"{shown} (your code is imported from there only)")


def digests(ref: str, code_dir: str | None) -> dict[str, str]:
    """``{path in its folder: sha256}`` of the files a reference runs (`locate`)."""
    folder, files = locate(ref, code_dir)
    return codefiles.file_digests(files, folder)


def _import(module: str, folder: Path):
    """Import `module` from `folder` (an allowed one, its files checked by `locate`): a module of that name
    found there wins over one already imported from elsewhere (two scenarios may both have a `models.py`)."""
    top = module.split(".")[0]
    found = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
    loaded = sys.modules.get(top)
    if (found is not None and loaded is not None and getattr(loaded, "__spec__", None) is not None
            and loaded.__spec__.origin != found.origin):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(folder))


def _defined_in(obj) -> tuple[str | None, Path | None]:
    """The module name and the file that define `obj` (a function, a class, a method), or Nones."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    owner = getattr(target, "__module__", None)
    try:
        where = inspect.getfile(target)
    except (TypeError, OSError):
        return owner, None
    return owner, Path(where).resolve()


def resolve(ref: str, code_dir: str | None):
    """The callable a ``MODULE:FUNCTION`` reference names; DataError (the reason) if there is none,
    CodeRefused if its files are not the user's to run (`locate`, checked before importing anything)."""
    module, attr = split_reference(ref)
    folder, files = locate(ref, code_dir)
    try:
        mod = _import(module, folder)
    except Exception as e:  # the user's module failed while importing: say how
        raise DataError(f"importing {module!r} failed: {type(e).__name__}: {e}") from None
    if Path(getattr(mod, "__file__", "") or "").resolve() != files[-1]:
        raise CodeRefused(f"importing {module!r} gave {getattr(mod, '__file__', None)}, not {files[-1]}")
    obj = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise DataError(f"module {module!r} ({files[-1]}) has no {attr!r}")
    if not callable(obj):
        raise DataError(f"{attr!r} of module {module!r} is a {type(obj).__name__}, not a function")
    # only what the named file defines: `mymodels:os.system`, or a function imported into it, reaches past it
    owner, where = _defined_in(obj)
    if owner != module or where != files[-1]:
        shown = f"{owner!r}" + (f" ({where})" if where else "")
        raise DataError(f"{attr!r} of module {module!r} is defined in {shown}, not in {files[-1]}; depl calls only "
                        f"functions the named file defines (name the module that defines it, or write one in "
                        f"{module!r} that calls it)")
    return obj


def check_code(scenario, pinned: bool) -> None:
    """Every MODULE:FUNCTION reference of `scenario` checked before anything is imported: its files are
    allowed (`locate`) and, if `pinned` (a plan), the very files the plan was made with (the digests in
    `scenario.code_hashes`).  DataError/CodeRefused naming the field; nothing is run."""
    refs = [(f"models[{i}].train.net", m.train.net) for i, m in enumerate(scenario.models)
            if m.train is not None and is_reference(m.train.net)]
    refs += [(f"datasets[{i}].source", d.source) for i, d in enumerate(scenario.datasets) if is_reference(d.source)]
    if is_reference(scenario.training.loss):
        refs.append(("training.loss", scenario.training.loss))
    pins = scenario.code_hashes
    for field, ref in refs:
        try:
            found = digests(ref, scenario.code_dir)
        except CodeRefused as e:
            raise CodeRefused(f"{field} = {ref!r}: {e}", e.folder) from None
        except DataError as e:
            raise DataError(f"{field} = {ref!r}: {e}") from None
        if not pinned:
            continue
        for path, digest in found.items():
            if pins is None or path not in pins:
                raise CodeRefused(f"{field} = {ref!r}: the plan records no digest of {path} (the plan was edited, "
                                  "or made where that file was not found), so nothing says it is the code the plan was made "
                                  "with; make the plan again where your code is: depl plan SCENARIO.toml --out PLAN.json")
            if pins[path] != digest:
                raise CodeRefused(f"{field} = {ref!r}: {path} is not the file this plan was made with ({digest[:19]}… "
                                  f"here, {pins[path][:19]}… in the plan); make the plan again with this code "
                                  "(depl plan SCENARIO.toml --out PLAN.json), or run it where the plan's code is")


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
    if not any(p.requires_grad for p in net.parameters()):   # the optimizer would fail on its first step
        raise DataError("it returned a network with no trainable parameters (none has requires_grad): nothing to "
                        "train")
    return net


def _arrays(part: Any, which: str, targets: str, loss: str) -> tuple[np.ndarray, np.ndarray, tuple[str, str]]:
    """(X, y) as float32 inputs and labels as the loss reads them (`source.fit_targets`: int64 class indices for
    cross_entropy), from a Dataset of pairs or a pair of tensors, with the dtypes they were given in (inputs,
    labels); DataError if they are not that, or hold a NaN or an infinity."""
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
            y = torch.stack([torch.as_tensor(np.asarray(b) if not torch.is_tensor(b) else b) for _, b in items])
        except (TypeError, ValueError, RuntimeError) as e:
            raise DataError(f"its {which} Dataset's items cannot be stacked into one tensor: {e}") from None
    else:
        raise DataError(f"its {which} part is a {type(part).__name__}; expected a torch Dataset of (x, y) pairs "
                        "or a pair of tensors (X, y)")
    if x.ndim < 2 or len(x) == 0:
        raise DataError(f"its {which} inputs have shape {tuple(x.shape)}; expected (samples, ...) with at least one sample")
    if y.ndim not in (1, 2) or len(y) != len(x):
        raise DataError(f"its {which} labels have shape {tuple(y.shape)} for {len(x)} inputs; expected one label "
                        "(a class index, or real-valued targets) per input")
    given = (str(x.dtype).removeprefix("torch."), str(y.dtype).removeprefix("torch."))
    try:
        x = x.to(torch.float32)
    except (TypeError, RuntimeError) as e:  # a complex or non-numeric tensor
        raise DataError(f"its {which} inputs ({given[0]}) cannot be made float32: {e}") from None
    bad = int((~torch.isfinite(x)).sum())
    if bad:  # every loss of a run on them would be NaN: refused here, not found out as a diverged run
        nans = int(torch.isnan(x).sum())
        what = " and ".join(w for w, k in (("NaN", nans), ("infinite", bad - nans)) if k)
        raise DataError(f"its {which} inputs hold {bad:,} {what} value{'s' * (bad > 1)} (of {x.numel():,}, "
                        f"in {int((~torch.isfinite(x.reshape(len(x), -1))).any(1).sum()):,} of its {len(x):,} samples)")
    return x.numpy(), fit_targets(y.numpy(), targets, which, loss), given


def load_source(ref: str, code_dir: str | None, seed: int | None = None, loss: str = "cross_entropy") -> Source:
    """FUNCTION() → (train, test) as a `Source` (DataError with the reason if it is not one); FUNCTION(seed=…), a
    run's own draw of your data, where `seed` is given (`takes_seed`); its labels as `loss` reads them."""
    locate(ref, code_dir)  # checked on every call, not only on the first (cached) one
    return _load_source(ref, code_dir, seed, loss)


_REPEATED: set[tuple] = set()   # the factory calls `check_repeatable` has made twice in this process


def check_repeatable(ref: str, code_dir: str | None, seed: int | None = None, loss: str = "cross_entropy") -> None:
    """Your factory called a second time as `load_source` calls it (the same `seed`), uncached: it must return the
    very data it returned the first time — every process that trains calls it, and a factory that draws from a
    global random generator gives each its own data.  Once per process and call; DataError saying so otherwise."""
    key = (ref, code_dir, seed, loss)
    if key in _REPEATED:
        return
    first = load_source(ref, code_dir, seed, loss)
    again = _load_source.__wrapped__(ref, code_dir, seed, loss)
    parts = ("x_train", "y_train", "x_test", "y_test")
    differ = [p for p in parts if not np.array_equal(getattr(first, p), getattr(again, p))]
    if differ:
        p = _seed_parameter(resolve(ref, code_dir))
        shown = seed if seed is not None or p is None or p.default is not inspect.Parameter.empty else 0
        call = f"{ref.partition(':')[2]}(" + ("" if shown is None else f"seed={shown}") + ")"
        what = {"x_train": "train inputs", "y_train": "train labels", "x_test": "test inputs",
                "y_test": "test labels"}[differ[0]]
        same = "seed" if shown is not None else "call"
        raise DataError(f"it returned different data for the same {same} (called twice as {call}: its {what} "
                        "differ) — uses a global random generator? draw from the seed it is given, or from a "
                        "fixed one (e.g. torch.Generator().manual_seed(seed), numpy.random.default_rng(seed))")
    _REPEATED.add(key)


def takes_seed(ref: str, code_dir: str | None) -> bool:
    """Whether your data factory draws its data from a `seed` keyword (then a run that draws its data calls it so)."""
    locate(ref, code_dir)
    return _seed_parameter(resolve(ref, code_dir)) is not None


def _seed_parameter(factory) -> inspect.Parameter | None:
    """The factory's `seed` parameter; None without one (or no signature to read: a builtin, called without)."""
    try:
        return inspect.signature(factory).parameters.get("seed")
    except (TypeError, ValueError):
        return None


@lru_cache(maxsize=4)
def _load_source(ref: str, code_dir: str | None, seed: int | None = None, loss: str = "cross_entropy") -> Source:
    factory = resolve(ref, code_dir)
    p = _seed_parameter(factory)
    if seed is None and p is not None and p.default is inspect.Parameter.empty:  # it always draws: draw 0 is fixed
        seed = 0
    try:
        out = factory() if seed is None else factory(seed=seed)
    except Exception as e:
        raise DataError(f"calling it failed: {type(e).__name__}: {e}") from None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise DataError(f"it returned a {type(out).__name__}; expected (train, test)")
    targets = targets_of(loss)
    xt, yt, given = _arrays(out[0], "train", targets, loss)
    xe, ye, _ = _arrays(out[1], "test", targets, loss)
    if xt.shape[1:] != xe.shape[1:]:
        raise DataError(f"its train inputs have shape {xt.shape[1:]} but its test inputs {xe.shape[1:]}")
    if yt.dtype != ye.dtype or yt.shape[1:] != ye.shape[1:]:
        raise DataError(f"its train labels ({yt.dtype}, shape {yt.shape[1:]} per sample) and its test labels "
                        f"({ye.dtype}, {ye.shape[1:]}) are not of one kind")
    n_classes = int(max(yt.max(), ye.max())) + 1 if yt.dtype.kind in "iu" else outputs(yt)
    return Source(np.ascontiguousarray(xt), yt, np.ascontiguousarray(xe), ye, n_classes, given)
