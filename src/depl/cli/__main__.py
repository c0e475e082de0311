"""`python -m depl.cli`."""

from .app import main

main()
