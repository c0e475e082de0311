"""The depl app: every command, registered in the order `depl --help` lists them.

`--json` prints one JSON object on stdout and nothing else there (human text
is left out; errors still go to stderr with the exit codes of depl.cli.console).
No command module imports torch at import time, so planning never needs the
`train` extra.
"""

from __future__ import annotations

import os

import typer
from rich.markup import escape

from . import coverage, fitting, planning, reproduce, training, validation
from .console import EXIT_BAD_INPUT, err_console

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depl: plan, run and check dependable distributed training.")

for name, command in (("scenarios", planning.scenarios), ("plan", planning.plan), ("simulate", planning.simulate),
                      ("predict", planning.predict), ("reproduce", reproduce.reproduce), ("run", training.run),
                      ("profile", training.profile), ("export-app", training.export_app),
                      ("run-app", training.run_app), ("fleet-gateway", training.fleet_gateway)):
    app.command(name)(command)
app.add_typer(training.runs_app, name="runs")
app.command("fit")(fitting.fit)
app.command("calibrate")(fitting.calibrate)
app.command("validate")(validation.validate)
app.command("coverage")(coverage.coverage)


def _escape_help_markup(typer_app: typer.Typer) -> None:
    """Escape rich markup in every help text, once.

    Typer renders help through rich, which takes `[target]`, `[tool.flwr.app]` or
    `[default: OUT/runs.sqlite]` for style tags and silently drops them; our help
    texts mean those brackets literally (TOML tables, defaults).
    """
    import inspect

    if getattr(typer_app, "_depl_help_escaped", False):
        return
    typer_app._depl_help_escaped = True
    if isinstance(typer_app.info.help, str):
        typer_app.info.help = escape(typer_app.info.help)
    for info in typer_app.registered_commands:
        if info.callback is None:
            continue
        if info.help is None and info.callback.__doc__:
            info.help = inspect.getdoc(info.callback)
        if isinstance(info.help, str):
            info.help = escape(info.help)
        for param in inspect.signature(info.callback).parameters.values():
            # a ParameterInfo (typer.Option/Argument) shared by two commands is escaped once
            default = param.default
            if isinstance(default, typer.models.ParameterInfo) and isinstance(default.help, str) \
                    and not getattr(default, "_depl_help_escaped", False):
                default.help = escape(default.help)
                default._depl_help_escaped = True
    for group in typer_app.registered_groups:
        if isinstance(group.help, str):
            group.help = escape(group.help)
        if group.typer_instance is not None:
            _escape_help_markup(group.typer_instance)


_escape_help_markup(app)


def main() -> None:
    import sys

    import click

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # Flower asks before it phones home; depl never does
    try:
        code = typer.main.get_command(app).main(prog_name="depl", standalone_mode=False)
    except click.UsageError as e:
        # one line, like every other refusal: click would draw a usage box of several lines
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        if e.format_message():  # none when no arguments showed the help instead
            err_console.print(f"[bold red]error:[/] {escape(e.format_message())}{escape(hint)}", highlight=False)
        code = EXIT_BAD_INPUT
    except click.ClickException as e:
        err_console.print(f"[bold red]error:[/] {escape(e.format_message())}", highlight=False)
        code = e.exit_code
    except click.exceptions.Exit as e:  # raised by `fail` outside a command's context
        code = e.exit_code
    except click.Abort:  # Ctrl-C
        err_console.print("aborted", highlight=False, markup=False)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
