"""The command line: the only place that knows argv, exit codes and rich output.

Exit codes: 0 success; 1 unexpected failure; 2 bad input (a scenario, plan or
option that cannot be used); 3 the target cannot be met (infeasible).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depl: plan, run and check dependable distributed training.")
console = Console()
err_console = Console(stderr=True)

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one clear message to stderr and exit with `code` (no traceback)."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


@app.command()
def scenarios() -> None:
    """List the built-in scenarios (any command also takes a path to a TOML file)."""
    from rich.table import Table

    from .scenario import builtin_names, load_scenario

    t = Table(title="built-in scenarios")
    t.add_column("name")
    t.add_column("models")
    t.add_column("clusters")
    t.add_column("description")
    for name in builtin_names():
        s = load_scenario(name)
        t.add_row(name, str(len(s.models)), str(len(s.clusters)), s.description)
    console.print(t)


def _register_training() -> None:
    # Training commands live with the training code; their module imports no
    # torch at import time, so planning never needs the `train` extra.
    try:
        from .train import commands
    except ImportError:  # pragma: no cover - the module is part of the package
        return
    commands.register(app)


def main() -> None:
    _register_training()
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
