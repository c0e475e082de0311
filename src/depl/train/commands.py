"""CLI commands of real training; registered by depl.cli. No torch at import time."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `run`, `profile` and `runs` to the depl CLI."""
    return None
