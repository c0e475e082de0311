"""depl's modules import depl's modules at their top: an import inside a function is kept only for a module that loads
a heavy optional dependency (torch, flwr, scipy.stats …) that `depl plan` must not load, with the reason beside it
(docs/architecture.md, "The layers contract").  The command line reaches the workflows that train or fit through the
lazy package `depl.workflows`, so those workflows import their pipelines at the top."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "depl"
MOST = 20   # the in-function imports of depl's own modules that src/depl may hold


def in_function_imports(root: Path = PACKAGE) -> list[str]:
    """`path:line` of every import of a depl module (relative, or `depl…`) inside a function of a module under root."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                own = ((isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("depl")))
                       or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "depl" for a in node.names)))
                if own:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return sorted(set(found))


def test_at_most_twenty_imports_of_depl_modules_sit_inside_functions():
    found = in_function_imports()
    assert len(found) <= MOST, (f"{len(found)} imports of depl modules inside functions (at most {MOST}; import at the "
                                f"module's top, or reach a workflow through depl.workflows): {', '.join(found)}")


def test_the_count_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "m.py").write_text("from . import a\n\ndef f():\n    from .b import c\n    import depl.x\n"
                                   "    import json\n\nclass K:\n    def g(self):\n        from depl import y\n")
    assert in_function_imports(tmp_path) == [f"{tmp_path.name}/m.py:10", f"{tmp_path.name}/m.py:4",
                                             f"{tmp_path.name}/m.py:5"]
