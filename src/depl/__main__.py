"""`python -m depl`: the `depl` command (the same as `python -m depl.cli`)."""

from .cli import main

main()
