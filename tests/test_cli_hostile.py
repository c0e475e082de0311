"""The CLI as a hostile new user meets it: every --help shows its brackets, bad input gets one line and exit 2."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import click
import pytest
import typer
from typer.testing import CliRunner

import depl.cli as cli

BRACKET = re.compile(r"\[[^\[\]]+\]")


def _depl(*args, cwd=None):
    return subprocess.run([sys.executable, "-c", "from depl.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def _one_line_error(r) -> str:
    """Exit 2, one plain line on stderr, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _commands(command: click.Command, path=()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))


def _flat(text: str) -> str:
    """Help text without rich's box drawing and wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_every_help_keeps_its_square_brackets():
    # rich markup ate "[tool.flwr.app]", "[target]" and "[default: OUT/runs.sqlite]" from the help texts
    cli._register_training()
    root = typer.main.get_command(cli.app)
    runner = CliRunner()
    checked = 0
    for path, command in _commands(root):
        r = runner.invoke(cli.app, [*path, "--help"], env={"COLUMNS": "250"})
        assert r.exit_code == 0, (path, r.output)
        shown = _flat(r.output)
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in texts:
            for bracket in BRACKET.findall(inspect.cleandoc(text)):
                assert _flat(bracket) in shown, (path, bracket)
                checked += 1
    assert checked >= 10  # the scan did see the bracketed help texts it is about


def test_error_messages_keep_square_brackets(tmp_path):
    # a file name like "[run]scenario.toml" used to lose its "[run]" in the error line
    line = _one_line_error(_depl("plan", "[run]scenario.toml", cwd=tmp_path))
    assert "[run]scenario.toml" in line
