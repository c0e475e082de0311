"""The depl app: every command, registered in the order `depl --help` lists them.

`--json` prints one JSON object on stdout and nothing else there (human text
is left out; errors still go to stderr with the exit codes of depl.cli.console).
No command module imports torch at import time, so planning never needs the
`train` extra.
"""

from __future__ import annotations

import inspect
import os
import re

import typer
from rich.markup import escape

from .. import __version__
from . import apps, certify, coverage, fitting, models, planning, profile, reproduce, run, runs, validation
from .console import EXIT_BAD_INPUT, err_console, output, print_json


def _help(text: str) -> str:
    """A help text as typer shows it, through rich: with rich markup escaped.

    Typer renders help through rich, which takes `[target]`, `[tool.flwr.app]` or
    `[default: OUT/runs.sqlite]` for style tags and silently drops them; our help
    texts mean those brackets literally (TOML tables, defaults).
    """
    return escape(inspect.cleandoc(text))


_escaped: set[int] = set()  # the Option/Argument objects escaped (one may be shared by several commands)


def _command(function) -> dict:
    """`app.command`'s arguments for one of our command functions: its docstring as the help, and the help of
    each of its arguments and options (the objects `typer.Option`/`typer.Argument` made for it) escaped."""
    arguments = {}
    for param in inspect.signature(function).parameters.values():
        info = param.default
        if isinstance(info, typer.models.ParameterInfo) and isinstance(info.help, str) and id(info) not in _escaped:
            info.help = _help(info.help)
            _escaped.add(id(info))
        if isinstance(info, typer.models.ArgumentInfo):
            arguments[param.name] = info.help
    return {"help": _help(function.__doc__ or ""), "cls": _keeping_argument_help(arguments)}


def _keeping_argument_help(helps: dict[str, str | None]) -> type:
    """A command class whose arguments keep their help: click ≥ 8.5 gives every parameter a help of its own,
    and sets it to None over the one typer up to 0.2x gave an argument (`depl plan --help` showed SCENARIO bare)."""

    class Command(typer.core.TyperCommand):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for p in self.params:
                if getattr(p, "help", None) is None and helps.get(p.name):
                    p.help = helps[p.name]

    return Command


# rich markup named, not left to typer's default (none in its older releases): the escaped help reads the same in all
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode="rich",
                  help=_help("depl: plan, run and check dependable distributed training."))
runs_app = typer.Typer(no_args_is_help=True, rich_markup_mode="rich", help=_help("Look at the runs in a store, and the models a run folder keeps."))

for name, command in (("scenarios", planning.scenarios), ("plan", planning.plan), ("simulate", planning.simulate),
                      ("predict", planning.predict), ("reproduce", reproduce.reproduce), ("run", run.run),
                      ("profile", profile.profile), ("export-app", apps.export_app),
                      ("run-app", apps.run_app), ("fleet-gateway", apps.fleet_gateway)):
    app.command(name, **_command(command))(command)
runs_app.command("show", **_command(runs.runs_show))(runs.runs_show)
runs_app.command("models", **_command(models.runs_models))(models.runs_models)
app.command("export-model", **_command(models.export_model))(models.export_model)
app.add_typer(runs_app, name="runs")
app.command("fit", **_command(fitting.fit))(fitting.fit)
app.command("calibrate", **_command(fitting.calibrate))(fitting.calibrate)
app.command("validate", **_command(validation.validate))(validation.validate)
app.command("certify", **_command(certify.certify))(certify.certify)
app.command("coverage", **_command(coverage.coverage))(coverage.coverage)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("depl")
        except PackageNotFoundError:  # run from a source tree that was never installed
            v = __version__
        typer.echo(f"depl {v}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="print depl's version and exit"),
          verbose: bool = typer.Option(False, "--verbose", help="a refusal that counts what it met (e.g. the seed "
                                       "ranges other steps used) lists each after its line")) -> None:
    output.json = output.printed = False  # until the command's own --json says otherwise
    output.verbose = verbose


def _parser_errors() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException): what typer's parser raises for a command line it refuses, and their base.

    Taken from `typer.BadParameter`, public in every typer: up to 0.2x it is click's (typer re-exports
    click's exceptions), later typer bundles its own copy of click and no longer installs click.
    """
    mro = {c.__name__: c for c in typer.BadParameter.__mro__}
    return mro["UsageError"], mro["ClickException"]


_SUGGESTION = re.compile(r"\s*\(?Did you mean [^?]*\?\)?")


def _one_suggestion(message: str) -> str:
    """The first "Did you mean …?" of a message only: click ≥ 8.4 suggests a command itself, after typer
    (on that click) has added its own suggestion to the message."""
    first = _SUGGESTION.search(message)
    if first is None:
        return message
    return message[:first.end()] + _SUGGESTION.sub("", message[first.end():])


def main() -> None:
    import sys

    usage_error, cli_error = _parser_errors()
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # Flower asks before it phones home; depl never does
    output.json = output.printed = output.verbose = False
    try:
        code = typer.main.get_command(app).main(prog_name="depl", standalone_mode=False)
    except usage_error as e:
        # one line, like every other refusal: typer would draw a usage box of several lines
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = _one_suggestion(e.format_message())
        if message:  # none when no arguments showed the help instead
            err_console.print(f"[bold red]error:[/] {escape(message)}{escape(hint)}", highlight=False)
            if output.json and not output.printed:
                print_json({"error": message, "exit_code": EXIT_BAD_INPUT})
        code = EXIT_BAD_INPUT
    except cli_error as e:
        err_console.print(f"[bold red]error:[/] {escape(e.format_message())}", highlight=False)
        code = e.exit_code
    except typer.Exit as e:  # raised by `fail` outside a command's context
        code = e.exit_code
    except typer.Abort:  # Ctrl-C
        err_console.print("aborted", highlight=False, markup=False)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
