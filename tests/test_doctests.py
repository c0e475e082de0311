"""The examples in depl's docstrings run, and say what they print.

Every module of the package whose docstrings hold `>>>` examples is one test
(collected here rather than with --doctest-modules, which would also import
the test helpers that register toy planners and laws).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import depl


def _modules_with_examples() -> list[str]:
    out = []
    for m in pkgutil.walk_packages(depl.__path__, "depl."):
        if m.name.endswith("__main__"):
            continue
        spec = m.module_finder.find_spec(m.name)
        if spec and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as f:
                if ">>> " in f.read():
                    out.append(m.name)
    return sorted(out)


MODULES = _modules_with_examples()


def test_the_package_has_examples():
    assert len(MODULES) >= 5, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (run: python -m doctest -v)"
