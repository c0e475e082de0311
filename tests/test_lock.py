"""requirements/lock.txt, the tested versions that `make demo`, `make test` and CI install, agrees with
pyproject.toml: it pins every declared dependency within its range, torch and flwr at the pyproject's pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"


def _lock() -> dict[str, Version]:
    """name -> pinned version; every line that is not a comment must be one `name==version`."""
    pins: dict[str, Version] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        # constraints: no extras, no options (an index or a folder of this machine), no ranges, no local label
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.!]*)", line)
        assert m, f"requirements/lock.txt: {line!r} is not `name==version`"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"requirements/lock.txt pins {name} twice"
        pins[name] = Version(m.group(2))
    return pins


def _declared() -> dict[str, list[Requirement]]:
    """pyproject's dependencies and those of the extras the Makefile installs, by extra ('' for the base)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return {"": [Requirement(r) for r in project["dependencies"]],
            **{e: [Requirement(r) for r in extras[e]] for e in ("dev", "train")}}


def test_the_lock_pins_every_declared_dependency_within_its_range():
    pins = _lock()
    declared = [r for reqs in _declared().values() for r in reqs if r.marker is None or r.marker.evaluate()]
    assert len(declared) >= 15 and len(pins) >= len({canonicalize_name(r.name) for r in declared})
    for r in declared:
        name = canonicalize_name(r.name)
        assert name in pins, f"{r} (pyproject.toml) is not in requirements/lock.txt: run `make lock`"
        assert r.specifier.contains(pins[name], prereleases=True), \
            f"requirements/lock.txt pins {name}=={pins[name]}, outside pyproject's {r}: run `make lock`"


def test_torch_and_flwr_are_pinned_alike_in_pyproject_and_the_lock():
    pins = _lock()
    train = {canonicalize_name(r.name): r for r in _declared()["train"]}
    for name, version in (("torch", "2.13.0"), ("flwr", "1.41.0")):
        assert str(train[name].specifier) == f"=={version}", train[name]
        assert pins[name] == Version(version), f"requirements/lock.txt: {name}=={pins[name]}"
    assert "simulation" in train["flwr"].extras  # its extra's distributions are pinned too
    assert "ray" in pins
    # the CPU build of torch: no CUDA distribution is part of the tested set
    assert not [n for n in pins if n.startswith("nvidia-")], sorted(pins)


def test_every_install_of_the_makefile_takes_the_locked_versions():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    installs = [line for line in make.splitlines() if re.search(r"pip install .*-e ", line)]
    assert len(installs) >= 2, installs  # `make demo`'s .[dev] and `make test`'s .[dev,train]
    for line in installs:
        assert "-c $(LOCK)" in line, line
    assert "LOCK   := requirements/lock.txt" in make
