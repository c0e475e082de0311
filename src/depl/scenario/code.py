"""References from a scenario to code: the networks and data sources depl builds itself, the user's own
MODULE:FUNCTION (checked by reading its file, never by running it), and the digests of the files they run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import codefiles


# The networks and data sources depl builds itself (depl.train.task.nets.NETS and
# depl.train.task.data.SOURCES; a test keeps the lists equal).  They are named here
# so that a scenario is checked without importing torch.  A value with a ':'
# is the user's own MODULE:FUNCTION, checked where it is imported.
BUILTIN_NETS = ("cnn1d", "cnn2d", "alexnet", "mobilenet", "alexnet28")
BUILTIN_SOURCES = ("mnist1d", "digits", "cifar10", "fashion-mnist")
BUILTIN_LOSSES = ("cross_entropy", "mse", "l1", "bce_with_logits")  # depl.train.task.losses.LOSSES


def _reference(v: str | None) -> str | None:
    """A `MODULE:FUNCTION` reference to user code must name both parts."""
    if v is not None and ":" in v:
        module, _, func = v.partition(":")
        if not module.strip() or not func.strip() or ":" in func:
            raise ValueError("a reference to your own code is MODULE:FUNCTION, e.g. mymodels:make_net")
    return v


def builtin_or_reference(kind: str, builtins: tuple[str, ...]):
    """A validator: one of `builtins`, or a well-formed MODULE:FUNCTION reference."""
    def check(v: str | None) -> str | None:
        if v is not None and ":" not in v and v not in builtins:
            raise ValueError(f"no such {kind}; choose one of {', '.join(builtins)} (or MODULE:FUNCTION)")
        return _reference(v)
    return check


def unknown_network(net: str, code_dir: str | None) -> str | None:
    """Why the MODULE:FUNCTION network `net` names nothing in `code_dir`, found by reading its file, not running
    it; None when it may exist (a built-in name, a function the file defines, no folder to look in, a file the
    reading cannot settle: a syntax error, ``import *``, names made at run time)."""
    if ":" not in net or not code_dir:
        return None
    module, _, attr = net.partition(":")
    if not all(p.isidentifier() for p in module.split(".")):
        return None
    try:
        files = codefiles.module_files(module, Path(code_dir))
        defined = codefiles.top_level_names(files[-1]) if files else None
    except codefiles.NotFound as e:
        return f"no network of this name: {e}"
    except (OSError, ValueError, SyntaxError, RecursionError):
        return None
    head = attr.split(".")[0].strip()
    if defined is None or head in defined:
        return None
    return (f"no network of this name: {files[-1]} defines no {head!r} (is it misspelt? it defines "
            f"{', '.join(sorted(n for n in defined if not n.startswith('_'))[:8]) or 'no public name'})")


def code_hashes(data: dict, code_dir: Path) -> dict[str, str] | None:
    """The digests of the files the scenario's references run, found in `code_dir` by reading, not importing
    (a file not found there is left out: running the scenario says so); None if none is found."""
    out: dict[str, str] = {}
    for ref in _references(data):
        module = ref.partition(":")[0]
        if not module or not all(p.isidentifier() for p in module.split(".")):
            continue  # the reference itself is refused when it is used
        try:
            files = codefiles.module_files(module, code_dir)
            out.update(codefiles.file_digests(files, code_dir))
        except (codefiles.NotFound, OSError, ValueError):
            continue
    return out or None


def _references(data: dict) -> list[str]:
    """The MODULE:FUNCTION networks, data and loss a scenario (as read from TOML) names."""
    def ref(v: Any) -> str | None:
        return v if isinstance(v, str) and ":" in v else None

    models = data.get("models") if isinstance(data.get("models"), list) else []
    datasets = data.get("datasets") if isinstance(data.get("datasets"), list) else []
    found = [ref(m["train"].get("net")) for m in models if isinstance(m, dict) and isinstance(m.get("train"), dict)]
    found += [ref(d.get("source")) for d in datasets if isinstance(d, dict)]
    training = data.get("training")
    if isinstance(training, dict):
        found.append(ref(training.get("loss")))
    return [r for r in found if r]


def references_code(data: dict) -> bool:
    """Whether a scenario (as read from TOML) names MODULE:FUNCTION networks or data."""
    return bool(_references(data))
