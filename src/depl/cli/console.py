"""What every command shares: the consoles, the exit codes, `fail`, JSON output, choices, the progress bar.

Exit codes: 0 success; 1 unexpected failure; 2 bad input (a scenario, plan or
option that cannot be used); 3 the target cannot be met (infeasible); 4 a
promise refuted (`simulate`, `validate`: the interval lies below ω).  A verdict's exit code is read from the one
map, `depl.certificate.Outcome.exit_code` (0, 3 undecided, 4 refuted), whose numbers these are.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from ..certificate.value import EXIT_NOT_CERTIFIED as EXIT_INFEASIBLE, EXIT_OK, EXIT_REFUTED
from ..jsonout import dumps
from ..workflows.common import check_output_file as check
from ..workflows.errors import Failed, Unreachable, WorkflowError

EXIT_BAD_INPUT = 2

# a pipe or a file gets whole lines (soft wrap) and wide tables, not 80 columns of folded text
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True)
WHOLE_LINES = 10_000   # the width of a progress line written to a file or a pipe: never cut

JSON_HELP = "print one JSON object on stdout (nothing else there)"


class _Output:
    """Whether the command running prints JSON (its --json): then a refusal is a JSON object on stdout too."""

    json = False
    printed = False  # a JSON object is on stdout already: a later refusal adds none
    verbose = False  # `depl --verbose`: a refusal's detail (what its one line counts) follows it


output = _Output()


def _json_mode(value: bool) -> bool:
    output.json, output.printed = bool(value), False
    return value


def json_option(help: str = JSON_HELP):
    """The --json option of every command that has one.

    Eager, so it is read before the other options are checked: a refusal of one of them (exit 2) is then
    `{"error": ..., "exit_code": 2}` on stdout as well as its line on stderr (`fail`, and `depl.cli.app.main`
    for what the parser refuses itself).
    """
    return typer.Option(False, "--json", help=help, is_eager=True, callback=_json_mode)


def print_json(obj) -> None:
    """One strict JSON object on stdout (non-finite numbers become null: JSON has no NaN/inf)."""
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()
    output.printed = True


def fail(message: str, code: int = EXIT_BAD_INPUT, result: dict | None = None, detail: tuple[str, ...] = ()) -> None:
    """Print one clear message to stderr and exit with `code` (no traceback).

    Under --json, stdout gets one JSON object too: `result` (what the command has to say, e.g. an infeasible
    plan's reachable quantile) or else `{"error": message}`, with `"exit_code": code` added.  `detail`: what the
    message only counts (every seed range a refusal met), a line each after it under `depl --verbose`.
    """
    # names in messages are the user's ("[/]", "[nan, 0.5]"): never parsed as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    if output.verbose:
        for line in detail:
            err_console.print(f"  {line}", highlight=False, markup=False)
    if output.json and not output.printed:
        print_json({**(result if result is not None else {"error": message}), "exit_code": code})
    raise typer.Exit(code)


def check_output_file(flag: str, path: Path, make_folders: bool = True) -> None:
    """Refuse an output file that cannot be written, before any work (depl.workflows.common.check_output_file)."""
    with refusals():
        check(flag, path, make_folders)


@contextmanager
def refusals():
    """Within: a workflow's refusal (depl.workflows.errors) is one line on stderr and its exit code (`fail`)."""
    try:
        yield
    except WorkflowError as e:
        code = 1 if isinstance(e, Failed) else EXIT_INFEASIBLE if isinstance(e, Unreachable) else EXIT_BAD_INPUT
        fail(str(e), code, e.result, e.detail)


def command_line() -> list[str] | None:
    """The depl command being run, as typed (["depl", "run", …]); None where depl was not started as a command
    (called from Python)."""
    argv = sys.argv
    if len(argv) > 1 and Path(argv[0]).name in ("depl", "__main__.py"):
        return ["depl", *argv[1:]]
    return None


def next_step(command: str, con: Console | None = None, when: bool = True) -> None:
    """The command a user would run next (`when` it is the next one), one dim line at the end of a command's text
    (none under --json: stdout then carries the JSON object only).  A command whose last line on stdout is its
    verdict (certify, validate) says it on stderr."""
    if when and not output.json:
        (con or console).print(f"[dim]next: {escape(command)}[/]", highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    """One warning line on stderr; the command goes on."""
    err_console.print(f"warning: {message}", highlight=False, markup=False)


def choice(enum: type[Enum], flag: str) -> dict:
    """typer.Option arguments for an Enum option whose wrong value is one plain line (exit 2).

    A `parser` rather than click's Choice type: typer's `click_type` is gone from its newer
    releases, and a parser is the documented way to convert an option's text in all of them.
    """
    values = [m.value for m in enum]

    def parse(value):
        # the text of a valid choice (the option is annotated `str`: typer's own Enum handling differs
        # between its releases)
        if isinstance(value, enum):
            return value.value
        if value in values:
            return value
        *rest, last = values
        fail(f"{flag} {value!r}: choose " + (f"{', '.join(rest)} or {last}" if rest else last))

    return {"parser": parse, "metavar": "[" + "|".join(values) + "]"}


def epoch_progress(unit: str = "epochs"):
    """The progress bar of the training commands (on stderr: stdout keeps the results); `unit`: what it counts."""
    # rich's Progress is a bar; depl's `Progress` is a model version's progress (A, B) in a scenario
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.progress import Progress as Bar

    # a file or a pipe gets whole lines (rich would cut them at 80 columns): a console as wide as the line
    con = err_console if err_console.is_terminal else Console(stderr=True, soft_wrap=True, width=WHOLE_LINES)
    return Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=con,
                    transient=False)
