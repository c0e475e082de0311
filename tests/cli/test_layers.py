"""The command layer's shape, read from the source with `ast`: every command function is short (it parses, calls
one workflow, prints), and nothing below the command line knows argv or exits the process
(docs/architecture.md, "The command layer")."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import depl
from depl.cli.app import app, runs_app

SRC = Path(depl.__file__).parent
MAX_LINES = 60  # a command function, from `def` to its last line (its decorators not counted)


def _commands():
    """(name, function) of every registered command, unwrapped from `trains_seeds`."""
    for typer_app, prefix in ((app, ""), (runs_app, "runs ")):
        for c in typer_app.registered_commands:
            yield prefix + c.name, inspect.unwrap(c.callback)


def _length(function) -> int:
    """Lines of a command's function (module level in its file), from `def` to its last line."""
    tree = ast.parse(Path(inspect.getsourcefile(function)).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function.__name__]
    return node.end_lineno - node.lineno + 1


def test_every_command_is_registered_and_found():
    names = {name for name, _ in _commands()}
    assert {"run", "profile", "runs show", "runs models", "export-app", "run-app", "fleet-gateway", "fit", "plan",
            "certify", "validate"} <= names


def test_no_command_function_is_over_60_lines():
    """Long option declarations are module-level constants (depl.cli.run's PLAN, SEEDS, …), the work is in the
    workflow: a command's function is its signature, one workflow call and its printing."""
    long = {name: n for name, f in _commands() if (n := _length(f)) > MAX_LINES}
    assert not long, f"command functions over {MAX_LINES} lines (def to last line): {long}"


def test_the_length_check_sees_a_long_function(tmp_path):
    """The check measures what it says: a 61-line function is over the limit."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    tree = ast.parse(f"def f():\n{body}\n")
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert node.end_lineno - node.lineno + 1 == 61 > MAX_LINES


def _calls(path: Path, dotted: set[str]) -> list[str]:
    """Where `path` uses one of `dotted` (e.g. sys.argv, sys.exit): 'file:line name'."""
    found = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and f"{n.value.id}.{n.attr}" in dotted:
            found.append(f"{path.relative_to(SRC)}:{n.lineno} {n.value.id}.{n.attr}")
    return found


def test_only_the_command_line_reads_argv_or_exits():
    below = [p for p in SRC.rglob("*.py") if "cli" not in p.relative_to(SRC).parts]
    found = [hit for p in below for hit in _calls(p, {"sys.argv", "sys.exit"})]
    assert not found, found


def test_the_reports_only_draw_finished_results():
    """depl.report reads results; the Monte Carlo behind a figure runs in its caller (e.g. depl.fit.bands)."""
    found = []
    for p in (SRC / "report").rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "simulate":
                found.append(f"{p.name}:{n.lineno}")
            if isinstance(n, ast.ImportFrom) and any(a.name == "loss_model_for" for a in n.names):
                found.append(f"{p.name}:{n.lineno} imports loss_model_for")
    assert not found, found
